package sessionfiles

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/storage/sessiontest"
)

// TestConformance runs the backup suite on real files.
func TestConformance(t *testing.T) {
	sessiontest.RunBackup(t, sessiontest.BackupHarness{Open: func(t *testing.T, data string) session.Backup {
		b, err := Open(data)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}})
}

// TestRegistered: the backup is the plugin sessionbackup.files.
func TestRegistered(t *testing.T) {
	open, err := session.LookupBackup("files")
	if err != nil {
		t.Fatal(err)
	}
	b, err := open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.(*Files); !ok {
		t.Fatalf("sessionbackup.files opened a %T", b)
	}
}

// TestLayout: every file is where session.Layout (seed 003) puts it, with
// exactly the bytes written, and no temporary file is left beside it.
func TestLayout(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	b, err := Open(data)
	if err != nil {
		t.Fatal(err)
	}
	lay := session.Layout{Data: data}
	const p, s = "p-20260101-000000-aaaa", "s-20260101-000000-bbbb"
	for _, tc := range []struct {
		s    string
		f    session.BackupFile
		path string
	}{
		{"", session.FileProject, lay.ProjectFile(p)},
		{s, session.FileCheckpoint, lay.Checkpoint(p, s)},
		{s, session.FileApproaches, lay.ApproachesFile(p, s)},
		{s, session.FileRemaining, lay.RemainingFile(p, s)},
		{s, session.FileResumeContext, lay.ResumeContextFile(p, s)},
	} {
		want := []byte("{\"file\": \"" + string(tc.f) + "\"}\n")
		if err := b.Write(p, tc.s, tc.f, want); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(tc.path)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %s holds %q, %v; want %q", tc.f, tc.path, got, err, want)
		}
		if filepath.Base(tc.path) != string(tc.f) {
			t.Errorf("%s kept as %s", tc.f, tc.path)
		}
	}
	if err := b.MakeSessionDirs(p, s); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(lay.Artifacts(p, s)); err != nil || !fi.IsDir() {
		t.Errorf("artifacts directory %s: %v", lay.Artifacts(p, s), err)
	}
	_ = filepath.WalkDir(data, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && filepath.Ext(path) != ".json" {
			t.Errorf("left behind: %s", path)
		}
		return nil
	})
	if err := b.Write(p, s, session.BackupFile("other.json"), []byte("{}")); err == nil {
		t.Error("a file not of the backup was written")
	}
}
