package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestBuildSaysWhatItDoes: ./build.sh host (what make run builds with)
// says what it is doing before go build, which prints nothing while it
// works: a minute or two the first time, with an empty module and build
// cache. A stand-in go on PATH fails the build at once; the line must come
// before it was called.
func TestBuildSaysWhatItDoes(t *testing.T) {
	bin := t.TempDir()
	fake := "#!/bin/sh\n[ \"$1\" = env ] && { echo linux; exit 0; }\necho \"stand-in go: $*\" >&2\nexit 3\n"
	if err := os.WriteFile(filepath.Join(bin, "go"), []byte(fake), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", filepath.Join("..", "build.sh"), "host")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "VERSION=v0", "COMMIT=c", "DATE=d")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("build.sh host succeeded with a go that fails:\n%s", out)
	}
	said := strings.Index(string(out), "build.sh: building bin/openstarry")
	built := strings.Index(string(out), "stand-in go: build")
	if said < 0 || built < 0 || said > built {
		t.Fatalf("build.sh host does not say what it does before go build:\n%s", out)
	}
}

// TestMatrixHeadroom: ./build.sh matrix fails a binary that is under its
// budget but by less than the headroom a release keeps, and says so with
// the binary's size, its budget and what is left.
func TestMatrixHeadroom(t *testing.T) {
	cmd := exec.Command("bash", filepath.Join("..", "build.sh"), "matrix")
	cmd.Env = append(os.Environ(), "DIST="+t.TempDir(), "TARGETS=linux/amd64", "SMALL_TARGETS=",
		"MAX_MIB=200", "HEADROOM_MIB=190", "VERSION=v0", "COMMIT=c", "DATE=d")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("build.sh matrix passed a binary less than 190 MiB under its budget of 200:\n%s", out)
	}
	re := regexp.MustCompile(`openstarry-linux-amd64: [0-9.]+ MiB leaves 1[89][0-9]\.[0-9]+ MiB of the budget of 200\.00 MiB, less than the 190\.00 MiB of headroom`)
	if !re.Match(out) {
		t.Fatalf("build.sh matrix did not say the binary's size, budget and headroom:\n%s", out)
	}
}

// TestBuildSizes: ./build.sh sizes lists the bytes of a binary by module
// and by package, and what it lists adds up to about the stripped binary.
func TestBuildSizes(t *testing.T) {
	cmd := exec.Command("bash", filepath.Join("..", "build.sh"), "sizes", "linux/amd64")
	cmd.Env = append(os.Environ(), "SIZES_TOP=5", "VERSION=v0", "COMMIT=c", "DATE=d")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build.sh sizes: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{"\nstd ", "\ngo.etcd.io/bbolt ", "\ngithub.com/openstarry/openstarry-edge ", "\n(function tables) ", "\nmain (cmd/openstarry) ", "package (the 5 largest)"} {
		if !strings.Contains(s, want) {
			t.Errorf("build.sh sizes lists no %q:\n%s", strings.TrimSpace(want), s)
		}
	}
	stripped := regexp.MustCompile(`linux/amd64: (\d+) bytes stripped`).FindStringSubmatch(s)
	total := regexp.MustCompile(`(?m)^total +([0-9.]+)$`).FindStringSubmatch(s)
	if stripped == nil || total == nil {
		t.Fatalf("build.sh sizes gives no stripped size or total:\n%s", s)
	}
	size, _ := strconv.ParseFloat(stripped[1], 64)
	sum, _ := strconv.ParseFloat(total[1], 64)
	// The symbols cover the file but its headers, section padding and
	// build information.
	if r := sum * 1024 / size; r < 0.9 || r > 1.02 {
		t.Errorf("the packages add up to %.0f KiB, %.2f of the stripped binary's %s bytes:\n%s", sum, r, stripped[1], s)
	}
}
