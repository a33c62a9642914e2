package logx

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRotatingFile: the file never grows past MaxBytes, Keep files are
// kept, lines are whole, and the newest lines are in PATH.
func TestRotatingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "openstarry.log")
	r := &RotatingFile{Path: path, MaxBytes: 100, Keep: 3}
	for i := 0; i < 40; i++ {
		if _, err := fmt.Fprintf(r, "line %02d 0123456789\n", i); err != nil { // 19 bytes
			t.Fatal(err)
		}
	}
	r.Close()
	files, _ := filepath.Glob(path + "*")
	if len(files) != 3 {
		t.Fatalf("files %v, want 3", files)
	}
	for _, f := range files {
		data, _ := os.ReadFile(f)
		if len(data) > 100 || len(data)%19 != 0 {
			t.Errorf("%s: %d bytes", f, len(data))
		}
	}
	cur, _ := os.ReadFile(path)
	if !strings.HasSuffix(string(cur), "line 39 0123456789\n") {
		t.Errorf("current file ends %q", cur)
	}
	old, _ := os.ReadFile(path + ".2")
	if !strings.HasPrefix(string(old), "line 25 ") {
		t.Errorf("oldest kept file starts %q", old)
	}
	// Reopening appends to the current file and counts its size.
	r2 := &RotatingFile{Path: path, MaxBytes: 100, Keep: 3}
	fmt.Fprintf(r2, "line 40 0123456789\n")
	r2.Close()
	if cur2, _ := os.ReadFile(path); len(cur2) != len(cur)+19 && len(cur2) != 19 {
		t.Errorf("after reopen: %d bytes (was %d)", len(cur2), len(cur))
	}
}
