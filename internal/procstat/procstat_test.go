//go:build linux

package procstat

import (
	"os"
	"testing"
)

// TestSelf reads this process's own figures: a resident set, a peak at
// least as large, and a clear error for a field that is not there.
func TestSelf(t *testing.T) {
	pid := os.Getpid()
	rss, err := Bytes(pid, "VmRSS")
	if err != nil || rss <= 0 {
		t.Fatalf("VmRSS: %d, %v", rss, err)
	}
	hwm, err := Bytes(pid, "VmHWM")
	if err != nil || hwm < rss {
		t.Fatalf("VmHWM %d (%v) below VmRSS %d", hwm, err, rss)
	}
	if _, err := Bytes(pid, "NoSuchField"); err == nil {
		t.Fatal("a missing field gave no error")
	}
	if mib, err := MiB(pid, "VmRSS"); err != nil || mib <= 0 {
		t.Fatalf("MiB: %v, %v", mib, err)
	}
}

// TestRollup reads this process's smaps_rollup: private and shared add up
// to the resident set, and anonymous memory is private.
func TestRollup(t *testing.T) {
	m, err := Rollup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.Rss <= 0 || m.Private+m.Shared != m.Rss {
		t.Errorf("private %d + shared %d != rss %d", m.Private, m.Shared, m.Rss)
	}
	if m.Anonymous <= 0 || m.Anonymous > m.Private {
		t.Errorf("anonymous %d, private %d", m.Anonymous, m.Private)
	}
	if _, err := Rollup(-1); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
