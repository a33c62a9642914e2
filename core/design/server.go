package design

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/httpx"
)

// Error codes of the design layer's JSON errors {"error": "...", "code": "..."}.
const (
	// CodeTemplateNotFound answers GET /templates/{name} for a name the
	// design layer does not hold. A Fetcher takes it as authoritative:
	// it does not fall back to its cache and deletes the cached copy.
	CodeTemplateNotFound = "template_not_found"
	CodeNotFound         = "not_found"          // no such route
	CodeMethodNotAllowed = "method_not_allowed" // only GET and HEAD are served
)

// Server is the design layer's HTTP handler (`openstarry design serve`):
//
//	GET /templates         [{"name","version","role","digest","signed"}, ...], sorted by name
//	GET /templates/{name}  the template's exact bytes; ETag "sha256:..." (strong),
//	                       X-Openstarry-Signature from {name}.json.sig when present;
//	                       If-None-Match with a matching tag answers 304
//	GET /healthz           {"status":"ok","templates":N}
//
// HEAD is served wherever GET is. Errors are JSON {"error","code"}. Every
// request is logged at debug level. The Set it serves is swapped whole
// (Swap), so a reload never serves a mix of two directories.
type Server struct {
	set atomic.Pointer[Set]
	log zerolog.Logger
}

// NewServer serves set; logger gets one debug line per request.
func NewServer(set *Set, logger zerolog.Logger) *Server {
	s := &Server{log: logger}
	s.set.Store(set)
	return s
}

// Swap replaces the served templates.
func (s *Server) Swap(set *Set) { s.set.Store(set) }

// Set returns the served templates.
func (s *Server) Set() *Set { return s.set.Load() }

// listItem is one element of GET /templates.
type listItem struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Role    string `json:"role"`
	Digest  string `json:"digest"`
	Signed  bool   `json:"signed"`
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	s.route(rw, r)
	s.log.Debug().Str("method", r.Method).Str("path", r.URL.Path).Int("status", rw.status).
		Int("bytes", rw.bytes).Str("remote", r.RemoteAddr).Dur("duration", time.Since(start)).
		Msg("design layer request")
}

func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	var handle func(http.ResponseWriter, *http.Request)
	switch {
	case p == "/templates" || p == "/templates/":
		handle = s.list
	case strings.HasPrefix(p, "/templates/") && !strings.Contains(p[len("/templates/"):], "/"):
		name := p[len("/templates/"):]
		handle = func(w http.ResponseWriter, r *http.Request) { s.template(w, r, name) }
	case p == "/healthz":
		handle = s.health
	default:
		writeError(w, http.StatusNotFound, CodeNotFound, "no such route: "+p)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		writeError(w, http.StatusMethodNotAllowed, CodeMethodNotAllowed, r.Method+" is not allowed; use GET")
		return
	}
	handle(w, r)
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	set := s.set.Load()
	items := make([]listItem, 0, set.Len())
	for _, n := range set.Names() {
		e, _ := set.Get(n)
		items = append(items, listItem{Name: n, Version: e.Template.Version, Role: e.Template.Role,
			Digest: e.Digest, Signed: e.Signature != ""})
	}
	w.Header().Set("Cache-Control", "no-cache")
	writeJSON(w, r, http.StatusOK, items)
}

func (s *Server) template(w http.ResponseWriter, r *http.Request, name string) {
	e, ok := s.set.Load().Get(name)
	if !ok {
		writeError(w, http.StatusNotFound, CodeTemplateNotFound, "template "+strconv.Quote(name)+" not found on this design layer")
		return
	}
	etag := `"` + e.Digest + `"`
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Cache-Control", "no-cache")
	if e.Signature != "" {
		h.Set(SignatureHeader, e.Signature)
	}
	if etagMatch(r.Header.Get("If-None-Match"), etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(e.Raw)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(e.Raw)
	}
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, r, http.StatusOK, map[string]any{"status": "ok", "templates": s.set.Load().Len()})
}

// etagMatch applies If-None-Match's weak comparison (RFC 9110 §13.1.2):
// "*" or any listed tag equal to etag once W/ is ignored.
func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

func writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	data = append(data, '\n')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(data)
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	httpx.Error(w, status, code, msg)
}

// statusWriter remembers the status and size for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.bytes += n
	return n, err
}

// VerifySet checks every template of set against trusted keys and returns
// one error per template that is unsigned or badly signed (rule
// "signature"). `design serve --trusted-key` refuses to start on any.
func VerifySet(set *Set, trusted []ed25519.PublicKey) ValidationErrors {
	var errs ValidationErrors
	for _, n := range set.Names() {
		e, _ := set.Get(n)
		var ves ValidationErrors
		if errors.As(VerifyEntry(e, trusted), &ves) {
			errs = append(errs, ves...)
		}
	}
	sortErrors(errs)
	return errs
}

// VerifyEntry checks one entry's .sig against trusted keys; the error, when
// not nil, is a ValidationErrors of one "signature" error.
func VerifyEntry(e *Entry, trusted []ed25519.PublicKey) error {
	err := Verify(trusted, e.Raw, e.Signature)
	if err == nil {
		return nil
	}
	msg := err.Error()
	if e.Signature == "" {
		msg = "no " + filepath.Base(e.File) + ".sig beside it (run openstarry templates sign)"
	}
	return ValidationErrors{{File: e.File, Rule: RuleSignature, Message: msg}}
}
