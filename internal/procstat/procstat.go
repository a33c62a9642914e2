// Package procstat reads a process's memory figures from Linux's
// /proc/PID/status (VmRSS, VmHWM, RssFile, RssAnon, …), for the tests and
// benchmarks that measure a real process.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Bytes returns the field of /proc/PID/status, which the kernel gives in
// kB, in bytes.
func Bytes(pid int, field string) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range bytes.Split(data, []byte("\n")) {
		f := bytes.Fields(l)
		if len(f) >= 2 && string(f[0]) == field+":" {
			kb, err := strconv.ParseInt(string(f[1]), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, field, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// MiB is Bytes in MiB.
func MiB(pid int, field string) (float64, error) {
	n, err := Bytes(pid, field)
	return float64(n) / (1 << 20), err
}
