// Package httpx owns what every HTTP listener of the product shares: the
// one-line JSON error body {"error","code"}, JSON 404 and 405 for unknown
// routes and wrong methods, the bearer-token and loopback checks, reading a
// bounded body (an oversized one is drained before the answer, so that the
// client reads a 400 rather than a connection reset), and the limits of a
// listener: header, body and idle timeouts and a cap on open connections.
//
// The agents' HTTP API (transport/httpapi), the daemon's HTTP listener and
// its control API (core/daemon) and the design layer's server (core/design)
// all use it, so an operator sees one behaviour everywhere.
//
// Invariant: every error any route writes is one line of JSON with "error"
// and "code" and the matching status; nothing answers plain text.
package httpx

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Codes every listener may answer, besides its own.
const (
	CodeNotFound         = "not_found"            // no such route
	CodeMethodNotAllowed = "method_not_allowed"   // the route exists for other methods (see Allow)
	CodeUnauthorized     = "unauthorized"         // missing or wrong bearer token
	CodeTooLarge         = "too_large"            // the body is over the route's limit
	CodeBadBody          = "bad_body"             // the body could not be read (or was too slow: see Limits.BodyTimeout)
	CodeBusy             = "too_many_connections" // the listener's connection cap is reached
	CodeInternal         = "internal"
)

// HeaderPlanToken carries, on the daemon's request to one of its agents,
// that agent's control token (OPENSTARRY_CONTROL_TOKEN): with it, and only
// with it, the agent's API accepts a task id of the plan: namespace
// (agent.PlanTaskPrefix), which session continuity keeps for plan tasks.
const HeaderPlanToken = "X-OpenStarry-Plan-Token"

// Appender is a value that encodes itself, byte for byte as json.Marshal
// would, without reflection (agent.TaskState, the answer to a task).
type Appender interface {
	AppendJSON(dst []byte) ([]byte, error)
}

// JSON writes v as one line of JSON with status; an Appender encodes
// itself.
func JSON(w http.ResponseWriter, status int, v any) {
	var data []byte
	var err error
	if a, ok := v.(Appender); ok {
		data, err = a.AppendJSON(make([]byte, 0, 256))
	} else {
		data, err = json.Marshal(v)
	}
	if err != nil {
		Error(w, http.StatusInternalServerError, CodeInternal, "encoding the answer: "+err.Error())
		return
	}
	write(w, status, append(data, '\n'))
}

// Pretty writes v as indented JSON with status, for answers people read
// with curl (the daemon's status); errors stay one line (Error).
func Pretty(w http.ResponseWriter, status int, v any) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		Error(w, http.StatusInternalServerError, CodeInternal, "encoding the answer: "+err.Error())
		return
	}
	write(w, status, append(data, '\n'))
}

// Error writes the error body {"error": msg, "code": code} on one line
// with status.
func Error(w http.ResponseWriter, status int, code, msg string) {
	write(w, status, errorBody(code, msg))
}

func errorBody(code, msg string) []byte {
	data, _ := json.Marshal(struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}{msg, code})
	return append(data, '\n')
}

func write(w http.ResponseWriter, status int, data []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(data)))
	h.Del("X-Content-Type-Options")
	w.WriteHeader(status)
	_, _ = w.Write(data)
}

// FromLoopback reports whether r came from a loopback address.
func FromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Bearer returns the token of r's "Authorization: Bearer" header.
func Bearer(r *http.Request) (string, bool) {
	return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
}

// TokenOK reports whether r carries token as its bearer token (compared in
// constant time). An empty token never matches.
func TokenOK(r *http.Request, token string) bool {
	got, ok := Bearer(r)
	return ok && token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// TokenOffLoopback requires token from clients off loopback; with an empty
// token it lets everything through. Refusals are answered 401 and told to
// logf (remote address and path); an address with MaxTokenFailures of them
// within TokenFailureWindow is answered 429 too_many_failures, whatever it
// sends, until the window has passed.
func TokenOffLoopback(token string, logf func(remote, path string), next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	fails := newFailures()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if FromLoopback(r) {
			next.ServeHTTP(w, r)
			return
		}
		if fails.refuseLocked(w, r) {
			return
		}
		if !TokenOK(r, token) {
			fails.fail(clientIP(r))
			if logf != nil {
				logf(r.RemoteAddr, r.URL.Path)
			}
			Error(w, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required from off loopback")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TokenAlways requires token from every client, loopback included; it is
// answered 401 and told to logf otherwise.
//
// There is no lockout: its callers share the daemon's loopback address, so
// one would lock the daemon out; the daemon's token is 130 random bits.
func TokenAlways(token string, logf func(remote, path string), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !TokenOK(r, token) {
			if logf != nil {
				logf(r.RemoteAddr, r.URL.Path)
			}
			Error(w, http.StatusUnauthorized, CodeUnauthorized, "a valid bearer token is required: this port serves its daemon only")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Routes serves mux, answering its unknown routes (404) and wrong methods
// (405, with Allow) as JSON errors instead of ServeMux's plain text.
func Routes(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(&jsonMiss{ResponseWriter: w, r: r}, r)
	})
}

// jsonMiss rewrites ServeMux's own 404 and 405 answers.
type jsonMiss struct {
	http.ResponseWriter
	r       *http.Request
	swallow bool
}

func (j *jsonMiss) WriteHeader(code int) {
	switch code {
	case http.StatusNotFound:
		j.swallow = true
		Error(j.ResponseWriter, code, CodeNotFound, "no route "+j.r.Method+" "+j.r.URL.Path)
	case http.StatusMethodNotAllowed:
		j.swallow = true
		Error(j.ResponseWriter, code, CodeMethodNotAllowed,
			j.r.Method+" is not allowed on "+j.r.URL.Path+"; allowed: "+j.Header().Get("Allow"))
	default:
		j.ResponseWriter.WriteHeader(code)
	}
}

func (j *jsonMiss) Write(b []byte) (int, error) {
	if j.swallow {
		return len(b), nil
	}
	return j.ResponseWriter.Write(b)
}

// DrainBytes is how much of an oversized body is read and thrown away
// before the 400 too_large answer. Past it the connection is closed with
// the rest unread (the client may then see a reset instead of the answer).
const DrainBytes = 64 << 20

// ErrTooLarge is returned by ReadBody for a body over its limit.
var ErrTooLarge = errors.New("body too large")

// ReadBody reads r's body, at most limit bytes. A longer body is drained
// (up to DrainBytes, within the listener's body deadline), the connection
// is marked to close after the answer, and ErrTooLarge is returned: the
// caller answers 400 too_large and the client reads it.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(limit)+1))
	if err != nil {
		return nil, err
	}
	if len(body) > limit {
		Drain(w, r)
		return nil, ErrTooLarge
	}
	return body, nil
}

// Drain reads and discards what is left of r's body (up to DrainBytes) and
// marks the connection to close after the answer.
func Drain(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	_, _ = io.Copy(io.Discard, io.LimitReader(r.Body, DrainBytes))
}
