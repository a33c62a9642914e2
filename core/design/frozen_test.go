package design

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

func TestLoadFrozen(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "templates", "echo.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "echo.json")
	misnamed := filepath.Join(dir, "other.json")
	unknown := filepath.Join(dir, "x", "echo.json")
	os.MkdirAll(filepath.Dir(unknown), 0o700)
	for p, data := range map[string][]byte{good: raw, misnamed: raw, unknown: []byte(`{"name":"echo","surprise":1}`)} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path, digest string
		want               error
	}{
		{"frozen bytes", good, Digest(raw), nil},
		{"changed bytes", good, Digest(append(raw, ' ')), ErrDigest},
		{"missing", filepath.Join(dir, "none.json"), Digest(raw), ErrNotFound},
		{"file name", misnamed, Digest(raw), ErrInvalidTemplate},
		{"unknown field", unknown, Digest([]byte(`{"name":"echo","surprise":1}`)), ErrInvalidTemplate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := LoadFrozen(tc.path, tc.digest, "")
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || res.Template.Name != "echo" || res.Digest != Digest(raw) || string(res.Raw) != string(raw) {
				t.Fatalf("%+v, %v", res, err)
			}
		})
	}
}

// An agent process the daemon starts loads its frozen blueprint without
// compiling the schema: the library's meta-schemas (about 1.7 MB) are never
// built there. Checked in a fresh process (this test binary again), where
// nothing has validated yet: LoadFrozen allocates little, and the first
// Validate after it compiles the schema and allocates megabytes, which
// shows the measure would see a LoadFrozen that validated.
func TestLoadFrozenCompilesNoSchema(t *testing.T) {
	if arg := os.Getenv("OPENSTARRY_FROZEN_CHILD"); arg != "" {
		path, digest, _ := strings.Cut(arg, "|")
		var m runtime.MemStats
		allocated := func() uint64 { runtime.ReadMemStats(&m); return m.TotalAlloc }
		before := allocated()
		res, err := LoadFrozen(path, digest, "")
		if err != nil {
			fmt.Printf("FROZEN error %v\n", err)
			return
		}
		frozen := allocated() - before
		before = allocated()
		if _, err := (Validator{}).Validate(path, res.Raw); err != nil {
			fmt.Printf("FROZEN error %v\n", err)
			return
		}
		fmt.Printf("FROZEN %d %d\n", frozen, allocated()-before)
		return
	}
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "templates", "echo.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "echo.json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadFrozenCompilesNoSchema$", "-test.count=1")
	cmd.Env = append(os.Environ(), "OPENSTARRY_FROZEN_CHILD="+path+"|"+Digest(raw))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var frozen, validate uint64
	line := regexp.MustCompile(`(?m)^FROZEN .*$`).Find(out)
	if _, err := fmt.Sscanf(string(line), "FROZEN %d %d", &frozen, &validate); err != nil {
		t.Fatalf("child printed no figures (%v):\n%s", err, out)
	}
	t.Logf("LoadFrozen allocated %d bytes; the first Validate after it %d", frozen, validate)
	if frozen > 256<<10 {
		t.Errorf("LoadFrozen allocated %d bytes: it compiled the schema", frozen)
	}
	if validate < 1<<20 {
		t.Errorf("the first Validate allocated only %d bytes: the schema was compiled before it (by LoadFrozen or at start-up)", validate)
	}
}
