package logx

import (
	"fmt"
	"os"
	"sync"
)

// RotatingFile is a log file that rotates by size: when a write would take
// it past MaxBytes, PATH.(Keep-1) is dropped, PATH.i becomes PATH.(i+1),
// PATH becomes PATH.1, and a new PATH is started. It is what a Windows
// service logs to, where no journal or logrotate does it. Safe for
// concurrent use; a line is never split across two files.
type RotatingFile struct {
	Path     string
	MaxBytes int64 // rotate before a write would exceed it; default 10 MiB
	Keep     int   // files kept, the current one included; default 3

	mu   sync.Mutex // guards f and size
	f    *os.File
	size int64
}

// Write appends p, rotating first when p would not fit.
func (r *RotatingFile) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	max := r.MaxBytes
	if max <= 0 {
		max = 10 << 20
	}
	if r.f == nil {
		if err := r.open(); err != nil {
			return 0, err
		}
	}
	if r.size > 0 && r.size+int64(len(p)) > max {
		if err := r.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := r.f.Write(p)
	r.size += int64(n)
	return n, err
}

// Close closes the current file.
func (r *RotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}

func (r *RotatingFile) open() error {
	f, err := os.OpenFile(r.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("log file: %w", err)
	}
	r.f, r.size = f, st.Size()
	return nil
}

func (r *RotatingFile) rotate() error {
	keep := r.Keep
	if keep <= 0 {
		keep = 3
	}
	// Windows cannot rename an open file: close it first.
	r.f.Close()
	r.f = nil
	os.Remove(fmt.Sprintf("%s.%d", r.Path, keep-1))
	for i := keep - 2; i >= 1; i-- {
		os.Rename(fmt.Sprintf("%s.%d", r.Path, i), fmt.Sprintf("%s.%d", r.Path, i+1))
	}
	if keep > 1 {
		if err := os.Rename(r.Path, r.Path+".1"); err != nil {
			return r.open() // keep logging to the same file rather than lose lines
		}
	} else if err := os.Truncate(r.Path, 0); err != nil {
		return r.open()
	}
	return r.open()
}
