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
