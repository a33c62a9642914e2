package httpx

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// CodeTooManyFailures answers a client locked out after too many wrong
// bearer tokens.
const CodeTooManyFailures = "too_many_failures"

// The bearer-token lockout, the same as the web UI's login: after
// MaxTokenFailures wrong or missing tokens from one address within
// TokenFailureWindow, every request from it is answered 429 until the
// window that began with its first failure has passed, the right token
// included.
const (
	MaxTokenFailures   = 5
	TokenFailureWindow = time.Minute
	maxFailureAddrs    = 10000
)

// failures counts wrong tokens per client address (IP, without the port).
type failures struct {
	now func() time.Time
	mu  sync.Mutex
	m   map[string]*failureCount
}

type failureCount struct {
	n     int
	first time.Time
}

func newFailures() *failures {
	return &failures{now: time.Now, m: map[string]*failureCount{}}
}

func clientIP(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// lockedOut returns how long addr must wait before it may try again.
func (f *failures) lockedOut(addr string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.m[addr]
	if c == nil {
		return 0
	}
	left := TokenFailureWindow - f.now().Sub(c.first)
	if left <= 0 {
		delete(f.m, addr)
		return 0
	}
	if c.n < MaxTokenFailures {
		return 0
	}
	return left
}

func (f *failures) fail(addr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	if len(f.m) >= maxFailureAddrs { // forget the stale ones, then any, before growing
		for k, c := range f.m {
			if now.Sub(c.first) >= TokenFailureWindow {
				delete(f.m, k)
			}
		}
		for k := range f.m {
			if len(f.m) < maxFailureAddrs {
				break
			}
			delete(f.m, k)
		}
	}
	c := f.m[addr]
	if c == nil || now.Sub(c.first) >= TokenFailureWindow {
		c = &failureCount{first: now}
		f.m[addr] = c
	}
	c.n++
}

// refuseLocked answers 429 when r's address is locked out, and reports
// whether it did.
func (f *failures) refuseLocked(w http.ResponseWriter, r *http.Request) bool {
	left := f.lockedOut(clientIP(r))
	if left <= 0 {
		return false
	}
	secs := int(left.Seconds()) + 1
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	Error(w, http.StatusTooManyRequests, CodeTooManyFailures,
		"too many wrong bearer tokens from "+clientIP(r)+": try again in "+strconv.Itoa(secs)+" s")
	return true
}
