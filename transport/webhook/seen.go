package webhook

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
)

// seen remembers the signatures of the deliveries taken within a window,
// in a file that survives restarts: one JSON line per delivery, appended
// and fsynced before the delivery is queued, rewritten without the expired
// lines when it is opened and when they outnumber the live ones.
type seen struct {
	path   string
	window time.Duration

	mu      sync.Mutex
	f       *os.File // nil: memory only (no directory)
	m       map[string]seenEntry
	written int // lines in the file
}

type seenEntry struct {
	At   int64  `json:"t"`  // unix milliseconds
	Sig  string `json:"s"`  // sha256 of the signature, hex
	Task string `json:"id"` // the task the delivery became
}

// openSeen loads path (made 0600, its directory 0700), dropping the lines
// older than window and any damaged line (a torn last append).
func openSeen(path string, window time.Duration, now time.Time) (*seen, error) {
	s := &seen{path: path, window: window, m: map[string]seenEntry{}}
	if path == "" {
		return s, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 4096), 1<<20)
		for sc.Scan() {
			var e seenEntry
			if json.Unmarshal(sc.Bytes(), &e) != nil || e.Sig == "" {
				continue
			}
			s.m[e.Sig] = e
		}
		err := sc.Err()
		f.Close()
		if err != nil && !errors.Is(err, bufio.ErrTooLong) { // a damaged line ends what is kept
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := s.compact(now); err != nil {
		return nil, err
	}
	return s, nil
}

// compact drops the expired entries and rewrites the file with the others.
// Called with mu held, or before s is shared.
func (s *seen) compact(now time.Time) error {
	cut := now.Add(-s.window).UnixMilli()
	var buf []byte
	for k, e := range s.m {
		if e.At < cut {
			delete(s.m, k)
			continue
		}
		b, _ := json.Marshal(e)
		buf = append(append(buf, b...), '\n')
	}
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	if err := atomicfile.WriteFile(s.path, buf, 0o600); err != nil {
		return err
	}
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	s.f, s.written = f, len(s.m)
	return nil
}

// take records that a delivery with signature digest sig becomes task. It
// answers the task recorded for sig when the same signature was taken
// within the window for another task (a replay), "" otherwise; the same
// task again (the source's own redelivery) is not a replay.
func (s *seen) take(sig, task string, now time.Time) (replayOf string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.m[sig]; ok && now.Sub(time.UnixMilli(e.At)) < s.window {
		if e.Task != task {
			return e.Task, nil
		}
		return "", nil
	}
	e := seenEntry{At: now.UnixMilli(), Sig: sig, Task: task}
	s.m[sig] = e
	if s.path == "" {
		return "", nil
	}
	if s.written > 2*len(s.m)+1024 {
		if err := s.compact(now); err != nil {
			delete(s.m, sig)
			return "", fmt.Errorf("recording the delivery in %s: %w", s.path, err)
		}
		return "", nil // the rewrite holds e
	}
	b, _ := json.Marshal(e)
	_, err = s.f.Write(append(b, '\n'))
	if err == nil {
		err = s.f.Sync()
	}
	s.written++
	if err != nil {
		delete(s.m, sig)
		return "", fmt.Errorf("recording the delivery in %s: %w", s.path, err)
	}
	return "", nil
}

func (s *seen) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
}
