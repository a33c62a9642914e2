// Package procstat reads a process's memory figures from Linux's
// /proc/PID/status (VmRSS, VmHWM, RssFile, RssAnon, …) and
// /proc/PID/smaps_rollup (its private and shared pages), for the tests and
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

// Memory is a process's resident memory split by who holds it, from
// /proc/PID/smaps_rollup, in bytes. Private pages are mapped by this
// process alone: its anonymous memory (heap, stacks, the runtime's own
// structures) and the pages of its files that no other process has
// mapped; they are what the process costs. Shared pages are mapped by
// other processes too: for an openstarry agent, mostly the binary's
// pages in the page cache, which the daemon and every agent share.
// Private + Shared = Rss.
type Memory struct {
	Rss, Private, Shared, Anonymous int64
}

// Rollup reads the memory of process pid: Private is Private_Clean +
// Private_Dirty, Shared is Shared_Clean + Shared_Dirty, Anonymous the
// anonymous pages (all of them private for a process that was not forked
// from another).
func Rollup(pid int) (Memory, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return Memory{}, err
	}
	return parseRollup(data)
}

func parseRollup(data []byte) (Memory, error) {
	var m Memory
	seen := map[string]bool{}
	for _, l := range bytes.Split(data, []byte("\n")) {
		f := bytes.Fields(l)
		if len(f) != 3 || string(f[2]) != "kB" {
			continue
		}
		key := string(bytes.TrimSuffix(f[0], []byte(":")))
		var dst *int64
		switch key {
		case "Rss":
			dst = &m.Rss
		case "Private_Clean", "Private_Dirty":
			dst = &m.Private
		case "Shared_Clean", "Shared_Dirty":
			dst = &m.Shared
		case "Anonymous":
			dst = &m.Anonymous
		default:
			continue
		}
		kb, err := strconv.ParseInt(string(f[1]), 10, 64)
		if err != nil {
			return Memory{}, fmt.Errorf("smaps_rollup: %s: %w", key, err)
		}
		*dst += kb << 10
		seen[key] = true
	}
	for _, k := range []string{"Rss", "Private_Clean", "Private_Dirty", "Shared_Clean", "Shared_Dirty"} {
		if !seen[k] {
			return Memory{}, fmt.Errorf("smaps_rollup has no %s", k)
		}
	}
	return m, nil
}
