package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
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
