package update

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/release"
)

func TestCompatible(t *testing.T) {
	self := Info{Version: "1.0", GOOS: "linux", GOARCH: "arm64", SnapshotSchema: 2, SnapshotSchemaRead: 2}
	for _, tc := range []struct {
		name string
		cand Info
		want error
	}{
		{"same schema", Info{Version: "1.1", GOOS: "linux", GOARCH: "arm64", SnapshotSchema: 2, SnapshotSchemaRead: 2}, nil},
		{"reads newer, writes ours", Info{Version: "1.1", GOOS: "linux", GOARCH: "arm64", SnapshotSchema: 2, SnapshotSchemaRead: 3}, nil},
		{"writes newer", Info{Version: "2.0", GOOS: "linux", GOARCH: "arm64", SnapshotSchema: 3, SnapshotSchemaRead: 3}, ErrIncompatible},
		{"cannot read ours", Info{Version: "0.9", GOOS: "linux", GOARCH: "arm64", SnapshotSchema: 1, SnapshotSchemaRead: 1}, ErrIncompatible},
		{"declares none", Info{Version: "old", GOOS: "linux", GOARCH: "arm64"}, ErrIncompatible},
		{"other arch", Info{Version: "1.1", GOOS: "linux", GOARCH: "amd64", SnapshotSchema: 2, SnapshotSchemaRead: 2}, ErrPlatform},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Compatible(self, tc.cand)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Compatible = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestJournalRoundTripAndDamage(t *testing.T) {
	p := filepath.Join(t.TempDir(), "update.json")
	if j, err := ReadJournal(p); j != nil || err != nil {
		t.Fatalf("missing journal: %v %v", j, err)
	}
	in := &Journal{Phase: PhaseTrial, From: "1", To: "2", ToSHA: "ab", Boots: 2, CommandID: "c-1"}
	if err := WriteJournal(p, in, time.Now()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(p); runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal mode %v", fi.Mode())
	}
	out, err := ReadJournal(p)
	if err != nil || out.Phase != PhaseTrial || out.Boots != 2 || out.CommandID != "c-1" || out.Format != JournalVersion {
		t.Fatalf("read back %+v %v", out, err)
	}
	for _, bad := range []string{"{", `{"phase":"maybe"}`, `{"phase":"trial","format":99}`} {
		os.WriteFile(p, []byte(bad), 0o600)
		if _, err := ReadJournal(p); !errors.Is(err, ErrCorruptJournal) {
			t.Errorf("%s: %v, want ErrCorruptJournal", bad, err)
		}
	}
}

func FuzzReadJournal(f *testing.F) {
	f.Add([]byte(`{"format":1,"phase":"trial","to_sha256":"ab","boots":1}`))
	f.Add([]byte(`{"phase":"committed"}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(dir, "j.json")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		j, err := ReadJournal(p)
		if err == nil && (j == nil || (!j.Phase.Final() && j.Phase != PhaseTrial && j.Phase != PhaseStaged)) {
			t.Fatalf("accepted %q as %+v", data, j)
		}
		if err != nil && !errors.Is(err, ErrCorruptJournal) {
			t.Fatalf("error %v does not wrap ErrCorruptJournal", err)
		}
	})
}

// release makes a release directory holding name (content) with
// SHA256SUMS signed by priv.
func makeRelease(t *testing.T, priv ed25519.PrivateKey, name string, content []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), content, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := release.Sign(dir, priv); err != nil {
		t.Fatal(err)
	}
	return dir
}

func key(t *testing.T) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

// TestFetch: a binary is accepted only with a SHA256SUMS signed by a
// trusted key that lists its digest, from a file or over HTTP; whatever is
// refused leaves no .new behind.
func TestFetch(t *testing.T) {
	pub, priv := key(t)
	_, other := key(t)
	content := []byte("#!/bin/sh\necho new\n")
	good := makeRelease(t, priv, "openstarry-test", content)
	foreign := makeRelease(t, other, "openstarry-test", content)
	tampered := makeRelease(t, priv, "openstarry-test", content)
	os.WriteFile(filepath.Join(tampered, "openstarry-test"), []byte("#!/bin/sh\necho evil\n"), 0o755)
	unlisted := makeRelease(t, priv, "something-else", content)
	os.WriteFile(filepath.Join(unlisted, "openstarry-test"), content, 0o755)
	srv := httptest.NewServer(http.FileServer(http.Dir(good)))
	defer srv.Close()
	for _, tc := range []struct {
		name    string
		from    string
		trusted []ed25519.PublicKey
		want    error
	}{
		{"file", filepath.Join(good, "openstarry-test"), []ed25519.PublicKey{pub}, nil},
		{"file URL", "file://" + filepath.ToSlash(filepath.Join(good, "openstarry-test")), []ed25519.PublicKey{pub}, nil},
		{"http", srv.URL + "/openstarry-test", []ed25519.PublicKey{pub}, nil},
		{"http missing", srv.URL + "/nothing", []ed25519.PublicKey{pub}, ErrUnsigned},
		{"no trusted key", filepath.Join(good, "openstarry-test"), nil, ErrUnsigned},
		{"signed by another key", filepath.Join(foreign, "openstarry-test"), []ed25519.PublicKey{pub}, ErrUnsigned},
		{"tampered", filepath.Join(tampered, "openstarry-test"), []ed25519.PublicKey{pub}, ErrUnsigned},
		{"not listed", filepath.Join(unlisted, "openstarry-test"), []ed25519.PublicKey{pub}, ErrUnsigned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := PathsFor(t.TempDir())
			_, digest, err := Fetcher{}.Fetch(context.Background(), p, tc.from, tc.trusted)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				got, _ := os.ReadFile(p.New)
				if string(got) != string(content) || len(digest) != 64 {
					t.Fatalf("fetched %q (%s)", got, digest)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Fetch = %v, want %v", err, tc.want)
			}
			if _, err := os.Stat(p.New); !os.IsNotExist(err) {
				t.Fatalf("a refused candidate left %s", p.New)
			}
			ents, _ := os.ReadDir(p.Dir)
			for _, e := range ents {
				t.Errorf("left behind: %s", e.Name())
			}
		})
	}
}

func TestCheckPlatform(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlatform(exe, runtime.GOOS, runtime.GOARCH, ""); err != nil {
		t.Fatalf("this test binary: %v", err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if err := CheckPlatform(exe, runtime.GOOS, other, ""); !errors.Is(err, ErrPlatform) {
		t.Fatalf("other arch: %v", err)
	}
	script := filepath.Join(t.TempDir(), "x")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if err := CheckPlatform(script, runtime.GOOS, runtime.GOARCH, ""); !errors.Is(err, ErrPlatform) {
		t.Fatalf("a script: %v", err)
	}
}

// TestBoot lays out a slot directory as each interruption leaves it and
// checks what Boot decides and where the journal ends.
func TestBoot(t *testing.T) {
	const oldBin, newBin, factory = "old binary", "new binary", "factory binary"
	sha := func(s string) string {
		p := filepath.Join(t.TempDir(), "f")
		os.WriteFile(p, []byte(s), 0o700)
		d, _ := FileSHA256(p)
		return d
	}
	for _, tc := range []struct {
		name      string
		journal   *Journal // nil: none
		slot      string   // "" none
		prev, new string
		exeIsSlot bool
		want      Action
		phase     Phase // after
		slotAfter string
	}{
		{name: "fresh device", want: Run},
		{name: "committed: hop to the slot", journal: &Journal{Phase: PhaseCommitted}, slot: newBin, want: Hop, phase: PhaseCommitted, slotAfter: newBin},
		{name: "committed, running the slot", journal: &Journal{Phase: PhaseCommitted}, slot: newBin, exeIsSlot: true, want: Run, phase: PhaseCommitted, slotAfter: newBin},
		{name: "staged: aborted", journal: &Journal{Phase: PhaseStaged, ToSHA: sha(newBin)}, new: newBin, want: Run, phase: PhaseAborted},
		{name: "staged over a kept version", journal: &Journal{Phase: PhaseStaged, ToSHA: sha(newBin)}, slot: oldBin, new: newBin, want: Hop, phase: PhaseAborted, slotAfter: oldBin},
		{name: "trial before the swap", journal: &Journal{Phase: PhaseTrial, ToSHA: sha(newBin), FromSHA: sha(oldBin)}, slot: oldBin, prev: oldBin, new: newBin, want: Hop, phase: PhaseRolledBack, slotAfter: oldBin},
		{name: "trial before the first swap", journal: &Journal{Phase: PhaseTrial, ToSHA: sha(newBin), FromSHA: sha(factory)}, prev: factory, new: newBin, want: Run, phase: PhaseAborted},
		{name: "trial after the swap: guard", journal: &Journal{Phase: PhaseTrial, ToSHA: sha(newBin), FromSHA: sha(oldBin)}, slot: newBin, prev: oldBin, want: Guard, phase: PhaseTrial, slotAfter: newBin},
		{name: "rolled back", journal: &Journal{Phase: PhaseRolledBack}, slot: oldBin, want: Hop, phase: PhaseRolledBack, slotAfter: oldBin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := t.TempDir()
			p := PathsFor(data)
			os.MkdirAll(p.Dir, 0o700)
			for path, content := range map[string]string{p.Slot: tc.slot, p.Prev: tc.prev, p.New: tc.new} {
				if content != "" {
					os.WriteFile(path, []byte(content), 0o700)
				}
			}
			os.WriteFile(filepath.Join(p.Dir, ".openstarry.new.tmp-123"), []byte("stray"), 0o600)
			exe := filepath.Join(data, "factory")
			os.WriteFile(exe, []byte(factory), 0o700)
			if tc.exeIsSlot {
				exe = p.Slot
			}
			m := &Manager{Paths: p, Exe: exe, Log: zerolog.New(zerolog.NewTestWriter(t))}
			if tc.journal != nil {
				if err := m.Write(tc.journal); err != nil {
					t.Fatal(err)
				}
			}
			got, _ := m.Boot()
			if got != tc.want {
				t.Fatalf("Boot = %v, want %v", got, tc.want)
			}
			j, err := m.Journal()
			if err != nil {
				t.Fatal(err)
			}
			if tc.journal != nil && j.Phase != tc.phase {
				t.Fatalf("journal phase %s, want %s (%s)", j.Phase, tc.phase, j.Reason)
			}
			slot, _ := os.ReadFile(p.Slot)
			if string(slot) != tc.slotAfter {
				t.Fatalf("slot holds %q, want %q", slot, tc.slotAfter)
			}
			if _, err := os.Stat(filepath.Join(p.Dir, ".openstarry.new.tmp-123")); err == nil {
				t.Fatal("a stray temporary file was kept")
			}
			if tc.phase != PhaseTrial {
				if _, err := os.Stat(p.New); err == nil {
					t.Fatal("an unfinished candidate was kept")
				}
			}
		})
	}
}

// TestApplyAndRollback: Apply keeps the running binary as .prev, then
// swaps; Rollback puts it back.
func TestApplyAndRollback(t *testing.T) {
	data := t.TempDir()
	p := PathsFor(data)
	os.MkdirAll(p.Dir, 0o700)
	exe := filepath.Join(data, "running")
	os.WriteFile(exe, []byte("v1"), 0o700)
	os.WriteFile(p.New, []byte("v2"), 0o700)
	m := &Manager{Paths: p, Exe: exe, Log: zerolog.New(zerolog.NewTestWriter(t))}
	d, _ := FileSHA256(p.New)
	j := &Journal{Phase: PhaseStaged, From: "1", To: "2", ToSHA: d}
	wrong := *j
	wrong.ToSHA = strings.Repeat("0", 64)
	if err := m.Apply(&wrong); err == nil {
		t.Fatal("Apply accepted a candidate that changed since it was verified")
	}
	if err := m.Apply(j); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p.Slot); string(b) != "v2" {
		t.Fatalf("slot %q", b)
	}
	if b, _ := os.ReadFile(p.Prev); string(b) != "v1" {
		t.Fatalf("prev %q", b)
	}
	if cur, _ := m.Journal(); cur.Phase != PhaseTrial || cur.FromSHA == "" {
		t.Fatalf("journal %+v", cur)
	}
	if err := m.Rollback(j, "test"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p.Slot); string(b) != "v1" {
		t.Fatalf("slot after rollback %q", b)
	}
	if cur, _ := m.Journal(); cur.Phase != PhaseRolledBack || cur.Reason != "test" {
		t.Fatalf("journal %+v", cur)
	}
}
