//go:build unix

package sessionfiles

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/openstarry/openstarry-edge/core/session"
)

// TestModes: files 0600 in 0700 directories, whatever the umask (a
// permissive one must not widen them, and the project's and a session's
// directories are 0700 even when they existed wider).
func TestModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	data := filepath.Join(t.TempDir(), "data")
	lay := session.Layout{Data: data}
	const p, s = "p-20260101-000000-aaaa", "s-20260101-000000-bbbb"
	// A session directory made by someone else, wider.
	if err := os.MkdirAll(lay.SessionDir(p, s), 0o777); err != nil {
		t.Fatal(err)
	}
	b, err := Open(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Write(p, "", session.FileProject, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if err := b.MakeSessionDirs(p, s); err != nil {
		t.Fatal(err)
	}
	for _, f := range []session.BackupFile{session.FileCheckpoint, session.FileApproaches, session.FileRemaining, session.FileResumeContext} {
		if err := b.Write(p, s, f, []byte("{}\n")); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{data, lay.Projects(), lay.ProjectDir(p), lay.SessionDir(p, s), lay.Artifacts(p, s)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want 0700", d, fi.Mode().Perm(), err)
		}
	}
	for _, f := range []string{lay.ProjectFile(p), lay.Checkpoint(p, s), lay.ApproachesFile(p, s), lay.RemainingFile(p, s), lay.ResumeContextFile(p, s)} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v; want 0600", f, fi.Mode().Perm(), err)
		}
	}
}
