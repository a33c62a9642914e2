//go:build linux

package slowdisk

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSlowSync checks that a file's data passes through, and that its
// fsync and its directory's fsync each take at least the delay.
func TestSlowSync(t *testing.T) {
	const delay = 30 * time.Millisecond
	dir := New(t, delay)
	p := filepath.Join(dir, "f")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < delay {
		t.Errorf("fsync took %v, less than the delay %v", el, delay)
	}
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	t0 = time.Now()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(t0); el < delay {
		t.Errorf("directory fsync took %v, less than the delay %v", el, delay)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "hello" {
		t.Fatalf("read back %q, %v", b, err)
	}
	names, err := os.ReadDir(dir)
	if err != nil || len(names) != 1 || names[0].Name() != "f" {
		t.Fatalf("listing: %v %v", names, err)
	}
}
