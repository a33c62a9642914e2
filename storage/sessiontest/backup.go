package sessiontest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/session"
)

// BackupHarness says how to open the backup under test (session.Backup,
// the plugin kind sessionbackup).
type BackupHarness struct {
	// Open opens the backup kept in data, a fresh t.TempDir or one
	// opened before; opening the same data again must find what was
	// written.
	Open func(t *testing.T, data string) session.Backup
}

// sessionFiles are the files of a session (FileProject is the project's).
var sessionFiles = []session.BackupFile{session.FileCheckpoint, session.FileApproaches, session.FileRemaining, session.FileResumeContext}

// RunBackup runs the backup suite against h: round trips of every file,
// the sentinel session.ErrNoFile, the listings a rebuild walks, a reopen,
// and concurrent writers with readers that see a whole file.
func RunBackup(t *testing.T, h BackupHarness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("sessiontest: BackupHarness.Open is nil")
	}
	for _, tc := range []struct {
		name string
		run  func(t *testing.T, h BackupHarness)
	}{
		{"RoundTrip", testBackupRoundTrip},
		{"Missing", testBackupMissing},
		{"Listing", testBackupListing},
		{"Reopen", testBackupReopen},
		{"Concurrent", testBackupConcurrent},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, h) })
	}
}

// content is a file's bytes, different per file, session and version.
func content(f session.BackupFile, sessionID string, v int) []byte {
	return []byte(fmt.Sprintf("{\n  \"file\": %q,\n  \"session\": %q,\n  \"v\": %d\n}\n", f, sessionID, v))
}

func mustRead(t *testing.T, b session.Backup, p, s string, f session.BackupFile) []byte {
	t.Helper()
	data, err := b.Read(p, s, f)
	if err != nil {
		t.Fatalf("Read(%s, %s, %s): %v", p, s, f, err)
	}
	return data
}

func mustWrite(t *testing.T, b session.Backup, p, s string, f session.BackupFile, data []byte) {
	t.Helper()
	if err := b.Write(p, s, f, data); err != nil {
		t.Fatalf("Write(%s, %s, %s): %v", p, s, f, err)
	}
}

func testBackupRoundTrip(t *testing.T, h BackupHarness) {
	b := h.Open(t, t.TempDir())
	const p, s = "p-20260101-000000-aaaa", "s-20260101-000000-bbbb"
	mustWrite(t, b, p, "", session.FileProject, content(session.FileProject, "", 1))
	for _, f := range sessionFiles {
		mustWrite(t, b, p, s, f, content(f, s, 1))
	}
	if got := mustRead(t, b, p, "", session.FileProject); !bytes.Equal(got, content(session.FileProject, "", 1)) {
		t.Errorf("project.json read back %q", got)
	}
	for _, f := range sessionFiles {
		if got := mustRead(t, b, p, s, f); !bytes.Equal(got, content(f, s, 1)) {
			t.Errorf("%s read back %q", f, got)
		}
	}
	// Overwrite: a shorter file leaves nothing of the longer one.
	for _, f := range sessionFiles {
		mustWrite(t, b, p, s, f, []byte("{}\n"))
		if got := mustRead(t, b, p, s, f); string(got) != "{}\n" {
			t.Errorf("%s after an overwrite: %q", f, got)
		}
	}
	// An empty file is a file.
	mustWrite(t, b, p, s, session.FileCheckpoint, nil)
	if got := mustRead(t, b, p, s, session.FileCheckpoint); len(got) != 0 {
		t.Errorf("empty checkpoint read back %q", got)
	}
}

func testBackupMissing(t *testing.T, h BackupHarness) {
	b := h.Open(t, t.TempDir())
	const p, s = "p-20260101-000000-aaaa", "s-20260101-000000-bbbb"
	check := func(what, p, s string, f session.BackupFile) {
		t.Helper()
		data, err := b.Read(p, s, f)
		if !errors.Is(err, session.ErrNoFile) {
			t.Errorf("%s: Read(%s, %s, %s) = %q, %v; want an error wrapping session.ErrNoFile", what, p, s, f, data, err)
		}
	}
	check("no project", p, "", session.FileProject)
	for _, f := range sessionFiles {
		check("no project", p, s, f)
	}
	if err := b.MakeSessionDirs(p, s); err != nil {
		t.Fatal(err)
	}
	check("a session's directories but no project.json", p, "", session.FileProject)
	for _, f := range sessionFiles {
		check("a session's directories, no file", p, s, f)
	}
	mustWrite(t, b, p, s, session.FileCheckpoint, content(session.FileCheckpoint, s, 1))
	check("another session", p, "s-20260101-000000-cccc", session.FileCheckpoint)
	check("the checkpoint written, not the approaches", p, s, session.FileApproaches)
}

func testBackupListing(t *testing.T, h BackupHarness) {
	b := h.Open(t, t.TempDir())
	if ps, err := b.Projects(); err != nil || len(ps) != 0 {
		t.Fatalf("Projects of a fresh backup = %v, %v; want none and no error", ps, err)
	}
	const p1, p2 = "p-20260101-000000-aaaa", "p-20260102-000000-aaaa"
	mustWrite(t, b, p1, "", session.FileProject, content(session.FileProject, "", 1))
	if err := b.MakeSessionDirs(p1, "s-1"); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, b, p1, "s-2", session.FileCheckpoint, content(session.FileCheckpoint, "s-2", 1))
	if err := b.MakeSessionDirs(p2, "s-3"); err != nil {
		t.Fatal(err)
	}
	ps, err := b.Projects()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ps)
	if !slices.Equal(ps, []string{p1, p2}) {
		t.Errorf("Projects = %v, want %v", ps, []string{p1, p2})
	}
	ss, err := b.Sessions(p1)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ss)
	if !slices.Equal(ss, []string{"s-1", "s-2"}) {
		t.Errorf("Sessions(%s) = %v, want [s-1 s-2]", p1, ss)
	}
	if ss, _ := b.Sessions("p-20260103-000000-aaaa"); len(ss) != 0 {
		t.Errorf("Sessions of no project = %v", ss)
	}
}

func testBackupReopen(t *testing.T, h BackupHarness) {
	data := t.TempDir()
	const p, s = "p-20260101-000000-aaaa", "s-20260101-000000-bbbb"
	b := h.Open(t, data)
	mustWrite(t, b, p, "", session.FileProject, content(session.FileProject, "", 1))
	mustWrite(t, b, p, s, session.FileRemaining, content(session.FileRemaining, s, 1))
	b = h.Open(t, data)
	if got := mustRead(t, b, p, "", session.FileProject); !bytes.Equal(got, content(session.FileProject, "", 1)) {
		t.Errorf("project.json after a reopen: %q", got)
	}
	if got := mustRead(t, b, p, s, session.FileRemaining); !bytes.Equal(got, content(session.FileRemaining, s, 1)) {
		t.Errorf("remaining_tasks.json after a reopen: %q", got)
	}
}

// testBackupConcurrent: writers of several sessions at once, and readers of
// a file being replaced, which see one whole version, never a mix or none.
func testBackupConcurrent(t *testing.T, h BackupHarness) {
	b := h.Open(t, t.TempDir())
	const p = "p-20260101-000000-aaaa"
	const versions = 30
	mustWrite(t, b, p, "s-0", session.FileCheckpoint, content(session.FileCheckpoint, "s-0", 0))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := 0; w < 4; w++ {
		s := fmt.Sprintf("s-%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := 1; v <= versions; v++ {
				if err := b.Write(p, s, session.FileCheckpoint, content(session.FileCheckpoint, s, v)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < versions; i++ {
			got, err := b.Read(p, "s-0", session.FileCheckpoint)
			if err != nil {
				errs <- fmt.Errorf("read while it is replaced: %w", err)
				return
			}
			whole := false
			for v := 0; v <= versions; v++ {
				if bytes.Equal(got, content(session.FileCheckpoint, "s-0", v)) {
					whole = true
					break
				}
			}
			if !whole {
				errs <- fmt.Errorf("read a file that is no version written: %q", got)
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for w := 0; w < 4; w++ {
		s := fmt.Sprintf("s-%d", w)
		if got := mustRead(t, b, p, s, session.FileCheckpoint); !bytes.Equal(got, content(session.FileCheckpoint, s, versions)) {
			t.Errorf("%s: last write lost: %q", s, got)
		}
	}
}
