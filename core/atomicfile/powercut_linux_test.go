package atomicfile_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/internal/powercut"
)

// TestPowerCut: a file written with WriteFile into directories made with
// MkdirAll is there after a power cut; with os.MkdirAll the directories,
// and the file with them, may be gone (the same case, as the control).
func TestPowerCut(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mkdirAll func(string, os.FileMode) error
		survives bool
	}{
		{"atomicfile.MkdirAll", atomicfile.MkdirAll, true},
		{"os.MkdirAll", os.MkdirAll, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := powercut.New(t, 1)
			dir := filepath.Join(p.Dir(), "data", "agents", "a")
			if err := tc.mkdirAll(dir, 0o750); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "state.json")
			if err := atomicfile.WriteFile(path, []byte("tick 1"), 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Cut(powercut.Drop); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if tc.survives && (err != nil || string(got) != "tick 1") {
				t.Fatalf("after the cut: %q, %v; want %q", got, err, "tick 1")
			}
			if !tc.survives && err == nil {
				t.Fatalf("after the cut the file is there without its directories made durable: the simulator let it through")
			}
		})
	}
}
