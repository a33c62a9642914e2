package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestFits: a binary passes only when it is at least its headroom under
// its budget, and the error says by how much it missed.
func TestFits(t *testing.T) {
	const mi = 1 << 20
	for _, tc := range []struct {
		name                string
		size, max, headroom int64
		want                string // "" when it fits
	}{
		{"well under", 17 * mi, 20 * mi, 1 * mi, ""},
		{"exactly the headroom", 19 * mi, 20 * mi, 1 * mi, ""},
		{"one byte short of the headroom", 19*mi + 1, 20 * mi, 1 * mi, "leaves 1.00 MiB of the budget of 20.00 MiB, less than the 1.00 MiB of headroom"},
		{"42 KB under", 20*mi - 42<<10, 20 * mi, 1 * mi, "leaves 0.04 MiB of the budget of 20.00 MiB"},
		{"at the budget, no headroom asked", 20 * mi, 20 * mi, 0, ""},
		{"over the budget", 20*mi + 1, 20 * mi, 1 * mi, "exceeds the budget of 20.00 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fits(tc.size, tc.max, tc.headroom)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestCheckHeadroom runs the check on a real static binary: it passes with
// the headroom its size leaves, and fails, naming its size, its budget and
// what is left, when asked for more.
func TestCheckHeadroom(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "main.go")
	if err := os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "hello")
	build := exec.Command("go", "build", "-o", bin, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	max := st.Size() + 1<<20
	if _, err := check(bin, max, 1<<20); err != nil {
		t.Errorf("1 MiB under its budget, with 1 MiB of headroom asked: %v", err)
	}
	_, err = check(bin, max, 1<<20+1)
	if err == nil || !strings.Contains(err.Error(), "leaves 1.00 MiB of the budget") {
		t.Errorf("a byte less headroom than asked: %v", err)
	}
}
