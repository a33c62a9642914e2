// Package logbuf is the buffer a test hands to a logger (zerolog.New(&b)),
// a server or a child process, and reads while they write: a bytes.Buffer
// safe for concurrent use.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what is written to it. It is safe for concurrent use;
// the zero value is empty.
type Buffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

// Write appends p.
func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the JSON log lines of level ("warn", "info") that contain
// substr ("" for all of them).
func (l *Buffer) Lines(level, substr string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, `"level":"`+level+`"`) && strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}
