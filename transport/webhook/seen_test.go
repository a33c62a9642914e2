package webhook

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSeen: a signature is a replay under another task within the window,
// not under its own task, and not after the window; what was taken
// survives a reopen; a torn last line is dropped; expired lines are
// compacted away when the file is opened.
func TestSeen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "listeners", "webhook-forge.seen")
	t0 := time.Unix(1_800_000_000, 0)
	s, err := openSeen(path, time.Hour, t0)
	if err != nil {
		t.Fatal(err)
	}
	take := func(s *seen, sig, task string, at time.Time) string {
		t.Helper()
		prev, err := s.take(sig, task, at)
		if err != nil {
			t.Fatal(err)
		}
		return prev
	}
	if take(s, "a", "forge-1", t0) != "" || take(s, "a", "forge-1", t0.Add(time.Minute)) != "" {
		t.Fatal("the first delivery or its redelivery is a replay")
	}
	if got := take(s, "a", "forge-2", t0.Add(time.Minute)); got != "forge-1" {
		t.Fatalf("a replay within the window: %q", got)
	}
	take(s, "b", "forge-3", t0.Add(50*time.Minute))
	s.close()

	// A torn append.
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"t":18000`)
	f.Close()
	s, err = openSeen(path, time.Hour, t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if got := take(s, "a", "forge-4", t0.Add(2*time.Minute)); got != "forge-1" {
		t.Fatalf("a replay after a reopen: %q", got)
	}
	s.close()
	// An hour later "a" has expired: it is gone from the file and taken anew.
	s, err = openSeen(path, time.Hour, t0.Add(61*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), `"s":"a"`) || !strings.Contains(string(data), `"s":"b"`) || strings.Contains(string(data), `{"t":18000`+"\n") {
		t.Fatalf("after compaction:\n%s", data)
	}
	if got := take(s, "a", "forge-5", t0.Add(61*time.Minute)); got != "" {
		t.Fatalf("after the window: %q", got)
	}
	if got := take(s, "b", "forge-6", t0.Add(62*time.Minute)); got != "forge-3" {
		t.Fatalf("b within its window: %q", got)
	}
	s.close()
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v %v", fi.Mode(), err)
	}
}

// FuzzOpenSeen: whatever the record file holds, opening it neither fails
// nor panics, and what it then takes is remembered.
func FuzzOpenSeen(f *testing.F) {
	f.Add([]byte(`{"t":1800000000000,"s":"a","id":"forge-1"}` + "\n" + `{"t":1`))
	f.Add([]byte("\x00\xff\n\n{}\n[]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "w.seen")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		now := time.Unix(1_800_000_100, 0)
		s, err := openSeen(path, time.Hour, now)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		defer s.close()
		if _, err := s.take("zz-new", "forge-x", now); err != nil {
			t.Fatal(err)
		}
		if prev, _ := s.take("zz-new", "forge-y", now); prev != "forge-x" {
			t.Fatalf("not remembered: %q", prev)
		}
	})
}
