package tool

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestArtifactsConfinement: file_append, through the agent's Artifacts,
// never writes outside the artifacts directory: not by "..", an absolute
// path, a symlinked directory or file pointing out, nor a symlink deeper in
// the path; a symlink that stays inside is followed.
func TestArtifactsConfinement(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("symbolic links need privileges on Windows")
	}
	base := t.TempDir()
	dir := filepath.Join(base, "artifacts")
	outside := filepath.Join(base, "outside")
	if err := os.MkdirAll(outside, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("keep\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	art, err := OpenArtifacts(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer art.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("artifacts directory: %v %v", fi.Mode(), err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Symlink(outside, filepath.Join(dir, "outdir")))              // a directory out
	must(os.Symlink(secret, filepath.Join(dir, "outfile")))              // a file out, absolute
	must(os.Symlink("../outside/secret.txt", filepath.Join(dir, "rel"))) // a file out, relative
	must(os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	must(os.Symlink("../../outside", filepath.Join(dir, "sub", "up"))) // deeper in the path
	must(os.Symlink("sub", filepath.Join(dir, "inside")))              // stays inside

	fa, err := Lookup("file_append")
	if err != nil {
		t.Fatal(err)
	}
	env := Env{AgentID: "a", ArtifactsDir: dir, Artifacts: art}
	run := func(file string) error {
		args, _ := json.Marshal(map[string]string{"file": file, "line": "x"})
		_, err := fa.Run(context.Background(), env, args)
		return err
	}
	for _, tc := range []struct {
		file string
		ok   bool
	}{
		{"ok.txt", true},
		{"new/dir/ok.txt", true},
		{"inside/via-link.txt", true},
		{"outdir/secret.txt", false},
		{"outdir/new.txt", false},
		{"outdir/deeper/new.txt", false},
		{"outfile", false},
		{"rel", false},
		{"sub/up/secret.txt", false},
		{"sub/up/new.txt", false},
		{"../outside/secret.txt", false},
		{"sub/../../outside/secret.txt", false},
		{secret, false},
		{"/etc/passwd", false},
		{"", false},
		{".", false},
		{"a\x00b", false},
	} {
		err := run(tc.file)
		if (err == nil) != tc.ok {
			t.Errorf("file_append %q: err = %v, want ok=%v", tc.file, err, tc.ok)
		}
		if !tc.ok && err != nil && !errors.Is(err, ErrOutside) {
			t.Errorf("file_append %q: %v, want ErrOutside", tc.file, err)
		}
	}
	if b, _ := os.ReadFile(secret); string(b) != "keep\n" {
		t.Fatalf("a file outside the artifacts directory was written: %q", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("files were created outside the artifacts directory: %v", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "sub", "via-link.txt")); string(b) != "x\n" {
		t.Fatalf("the inside link was not followed: %q", b)
	}
	for _, f := range []string{"ok.txt", "new/dir/ok.txt"} {
		fi, err := os.Stat(filepath.Join(dir, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, %v", f, fi.Mode(), err)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "new", "dir")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("new/dir: mode %v, %v", fi.Mode(), err)
	}

	// The root stays the directory that was opened, even if the path is
	// swapped for a symlink afterwards.
	must(os.Rename(dir, dir+".old"))
	must(os.Symlink(outside, dir))
	if err := run("swapped.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "swapped.txt")); err == nil {
		t.Fatal("a write followed the swapped artifacts path out")
	}
	if _, err := os.Stat(filepath.Join(dir+".old", "swapped.txt")); err != nil {
		t.Fatalf("the write did not land in the opened root: %v", err)
	}
}

// TestArtifactsMethods: Stat, Open and MkdirAll refuse what OpenFile refuses.
func TestArtifactsMethods(t *testing.T) {
	base := t.TempDir()
	art, err := OpenArtifacts(filepath.Join(base, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer art.Close()
	if err := art.MkdirAll("x/y"); err != nil {
		t.Fatal(err)
	}
	if fi, err := art.Stat("x/y"); err != nil || !fi.IsDir() {
		t.Fatalf("stat: %v %v", fi, err)
	}
	for _, p := range []string{"../a", "/tmp", ""} {
		if _, err := art.Stat(p); !errors.Is(err, ErrOutside) {
			t.Errorf("Stat(%q) = %v", p, err)
		}
		if _, err := art.Open(p); !errors.Is(err, ErrOutside) {
			t.Errorf("Open(%q) = %v", p, err)
		}
		if err := art.MkdirAll(p); !errors.Is(err, ErrOutside) {
			t.Errorf("MkdirAll(%q) = %v", p, err)
		}
	}
}
