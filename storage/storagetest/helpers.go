package storagetest

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// MustEqual fails the test unless got's contract JSON (agent.Encode) is,
// byte for byte, want's. Unlike the suite's own comparison it does not look
// at HistorySeq and QueueSeq: a backend's test that promises them checks
// them itself.
func MustEqual(t testing.TB, got, want *agent.Snapshot) {
	t.Helper()
	if got == nil {
		t.Fatalf("got nil, want tick %d", want.TickIndex)
	}
	g, _ := agent.Encode(got)
	w, _ := agent.Encode(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("loaded snapshot differs:\n got %s\nwant %s", g, w)
	}
}

// LogBuffer collects the lines a store logs (zerolog.New(&buf)), for a test
// to inspect. It is safe for concurrent use. The zero value is empty.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Lines returns the JSON log lines of level ("warn", "info") that contain
// substr ("" for all of them).
func (l *LogBuffer) Lines(level, substr string) []string {
	var out []string
	for _, line := range strings.Split(l.String(), "\n") {
		if strings.Contains(line, `"level":"`+level+`"`) && strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}
