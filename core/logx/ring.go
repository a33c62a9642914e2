package logx

import (
	"bytes"
	"sync"
)

// Ring keeps the last lines written to it (JSON log lines), for a remote
// `logs.tail`. Lines longer than MaxLine are cut. It is safe for concurrent
// use, and it never fails a write.
type Ring struct {
	mu      sync.Mutex
	lines   []string
	next    int
	full    bool
	partial []byte
}

// MaxLine bounds one kept line.
const MaxLine = 4096

// NewRing keeps the last n lines.
func NewRing(n int) *Ring { return &Ring{lines: make([]string, n)} }

// Write implements io.Writer.
func (r *Ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	data := p
	for len(data) > 0 {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(r.partial) < MaxLine {
				r.partial = append(r.partial, data[:min(len(data), MaxLine-len(r.partial))]...)
			}
			break
		}
		line := append(r.partial, data[:min(i, MaxLine)]...)
		if len(line) > MaxLine {
			line = line[:MaxLine]
		}
		r.lines[r.next] = string(line)
		r.next = (r.next + 1) % len(r.lines)
		r.full = r.full || r.next == 0
		r.partial = r.partial[:0]
		data = data[i+1:]
	}
	return len(p), nil
}

// Tail returns the last n lines, oldest first.
func (r *Ring) Tail(n int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	count := r.next
	if r.full {
		count = len(r.lines)
	}
	n = min(n, count)
	out := make([]string, 0, n)
	for i := count - n; i < count; i++ {
		out = append(out, r.lines[(r.next-count+i+len(r.lines))%len(r.lines)])
	}
	return out
}
