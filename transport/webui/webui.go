package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// CookieName is the browser session's cookie.
const CookieName = "openstarry_session"

// HeaderCSRF carries the session's CSRF token on state-changing requests.
const HeaderCSRF = "X-CSRF-Token"

// HeaderUser names, to the API behind, the person a browser session was
// opened for (the name given at login). The UI sets and the API reads it
// only as a label for decisions; it grants nothing.
const HeaderUser = "X-OpenStarry-User"

// Defaults of Options.
const (
	DefaultSessionTTL  = 12 * time.Hour
	DefaultMaxFailures = 5           // failed logins per address per FailureWindow
	FailureWindow      = time.Minute // how long failed logins are remembered
	maxSessions        = 1024        // the oldest goes when a new one would exceed it
	maxNameLen         = 64
)

// Options configure the UI.
type Options struct {
	// Token is the HTTP listener's token (http.token). Empty: no login is
	// possible, and the UI works from loopback only, as the API does.
	Token string
	// SessionTTL is how long a browser session lasts after its login;
	// default DefaultSessionTTL.
	SessionTTL time.Duration
	// MaxFailures is how many failed logins an address may make per
	// FailureWindow before it gets 429; default DefaultMaxFailures.
	MaxFailures int
	Log         zerolog.Logger
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// UI serves the web UI and turns its browser sessions into the API's
// bearer token.
type UI struct {
	opts   Options
	assets *assets
	cop    *http.CrossOriginProtection
	deny   http.Handler // answers a refused cross-origin request

	mu       sync.Mutex          // guards the fields below
	sessions map[string]*session // by cookie value
	failures map[string]*failures
}

// session is one logged-in browser.
type session struct {
	id      string // the cookie's value
	csrf    string
	name    string
	created time.Time
	expires time.Time
}

type failures struct {
	n     int
	first time.Time
}

// New returns the UI. It fails only if the embedded files are broken, which
// the package's tests catch.
func New(opts Options) (*UI, error) {
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.MaxFailures <= 0 {
		opts.MaxFailures = DefaultMaxFailures
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	sub, err := fsSub()
	if err != nil {
		return nil, err
	}
	a, err := loadAssets(sub)
	if err != nil {
		return nil, err
	}
	u := &UI{opts: opts, assets: a, cop: http.NewCrossOriginProtection(),
		sessions: map[string]*session{}, failures: map[string]*failures{}}
	u.deny = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.opts.Log.Warn().Str("remote", r.RemoteAddr).Str("method", r.Method).Str("path", r.URL.Path).
			Str("origin", r.Header.Get("Origin")).Msg("http: cross-origin request refused")
		writeError(w, http.StatusForbidden, "cross_origin",
			"cross-origin request refused: state-changing calls must come from this device's own pages")
	})
	return u, nil
}

// CompressedSize is the size in bytes of the whole UI as a browser
// downloads it (page, script, style sheet, icon; gzipped).
func (u *UI) CompressedSize() int { return u.assets.compressedSize() }

// Wrap returns a handler that serves the UI at / and /ui/, refuses
// cross-origin state-changing requests, and hands everything else to api,
// with a valid session cookie turned into the bearer token.
func (u *UI) Wrap(api http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := u.cop.Check(r); err != nil {
			u.deny.ServeHTTP(w, r)
			return
		}
		switch p := r.URL.Path; {
		case p == "/" || p == "/index.html":
			if !getOrHead(w, r) {
				return
			}
			setPageHeaders(w)
			u.assets.index.serve(w, r, false)
		case strings.HasPrefix(p, "/ui/"):
			u.serveUI(w, r, strings.TrimPrefix(p, "/ui/"))
		default:
			u.serveAPI(api, w, r)
		}
	})
}

// setPageHeaders sets what the page needs to be safe: it loads nothing but
// its own files and cannot be framed.
func setPageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
}

// endpoint returns the handler of a /ui/ path that is not a file, and the
// one method it takes; nil for a file.
func (u *UI) endpoint(name string) (string, http.HandlerFunc) {
	switch name {
	case "session":
		return http.MethodGet, u.handleSession
	case "login":
		return http.MethodPost, u.handleLogin
	case "logout":
		return http.MethodPost, u.handleLogout
	}
	return "", nil
}

func (u *UI) serveUI(w http.ResponseWriter, r *http.Request, name string) {
	if method, h := u.endpoint(name); h != nil {
		if r.Method != method {
			methodNotAllowed(w, method)
			return
		}
		h(w, r)
		return
	}
	f, ok := u.assets.files[name]
	if !ok {
		writeError(w, http.StatusNotFound, "not_found", "no such file in the web UI: /ui/"+name)
		return
	}
	if getOrHead(w, r) {
		f.serve(w, r, r.URL.Query().Get("v") == f.hash)
	}
}

// getOrHead reports whether r is a GET or a HEAD, answering 405 when not.
func getOrHead(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return false
	}
	return true
}

// serveAPI passes r to api. A request that carries no Authorization but a
// session cookie is authenticated by the cookie: a state-changing one must
// also carry the session's CSRF token; then the cookie stands for the
// token. From loopback, where the API needs nothing, the cookie is ignored.
func (u *UI) serveAPI(api http.Handler, w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie(CookieName)
	if err != nil || r.Header.Get("Authorization") != "" {
		api.ServeHTTP(w, r)
		return
	}
	r = r.Clone(r.Context())
	dropCookie(r, CookieName)
	s := u.session(c.Value)
	if fromLoopback(r) {
		if s != nil {
			r.Header.Set(HeaderUser, s.name)
		} else {
			r.Header.Del(HeaderUser)
		}
		api.ServeHTTP(w, r)
		return
	}
	if s == nil {
		writeError(w, http.StatusUnauthorized, "session_expired", "your session has expired or the daemon restarted: log in again")
		return
	}
	if !safeMethod(r.Method) && subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderCSRF)), []byte(s.csrf)) != 1 {
		u.opts.Log.Warn().Str("remote", r.RemoteAddr).Str("path", r.URL.Path).Msg("http: state-changing request without the session's CSRF token refused")
		writeError(w, http.StatusForbidden, "csrf", "missing or wrong CSRF token: reload the page and try again")
		return
	}
	r.Header.Set("Authorization", "Bearer "+u.opts.Token)
	r.Header.Set(HeaderUser, s.name)
	api.ServeHTTP(w, r)
}

// sessionInfo is the answer of GET /ui/session and POST /ui/login.
type sessionInfo struct {
	// Authenticated: the caller may use the API (from loopback, with a
	// valid session cookie, or with the bearer token).
	Authenticated bool `json:"authenticated"`
	// LoginRequired: the caller is off loopback, so it needs the token.
	LoginRequired bool      `json:"login_required"`
	Loopback      bool      `json:"loopback"`
	Name          string    `json:"name,omitempty"`
	CSRF          string    `json:"csrf,omitempty"`
	Expires       time.Time `json:"expires,omitzero"`
}

func (u *UI) handleSession(w http.ResponseWriter, r *http.Request) {
	info := sessionInfo{Loopback: fromLoopback(r)}
	info.LoginRequired = !info.Loopback
	info.Authenticated = info.Loopback
	if u.opts.Token != "" {
		if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
			subtle.ConstantTimeCompare([]byte(got), []byte(u.opts.Token)) == 1 {
			info.Authenticated = true
		}
	}
	if c, err := r.Cookie(CookieName); err == nil {
		if s := u.session(c.Value); s != nil {
			info.Authenticated, info.Name, info.CSRF, info.Expires = true, s.name, s.csrf, s.expires
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, info)
}

type loginRequest struct {
	Token string `json:"token"`
	Name  string `json:"name"`
}

func (u *UI) handleLogin(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	addr := clientAddr(r)
	if u.opts.Token == "" {
		writeError(w, http.StatusBadRequest, "login_disabled",
			"no http.token is set, so this listener is for loopback only and needs no login")
		return
	}
	if wait := u.lockedOut(addr); wait > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int(wait.Seconds()+1)))
		writeError(w, http.StatusTooManyRequests, "too_many_attempts",
			fmt.Sprintf("too many failed logins from %s: try again in %d s", addr, int(wait.Seconds()+1)))
		return
	}
	var req loginRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "login: want JSON {\"token\": \"...\", \"name\": \"...\"}: "+jsonerr.Describe("the body", err))
		return
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		name = "operator"
	}
	if err := validName(name); err != nil {
		writeError(w, http.StatusBadRequest, "bad_name", err.Error())
		return
	}
	if subtle.ConstantTimeCompare([]byte(req.Token), []byte(u.opts.Token)) != 1 {
		u.fail(addr)
		u.opts.Log.Warn().Str("remote", r.RemoteAddr).Msg("web UI: login with a wrong token")
		writeError(w, http.StatusUnauthorized, "unauthorized", "wrong token: use the daemon's http.token (OPENSTARRY_HTTP_TOKEN)")
		return
	}
	s, err := u.newSession(name)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	u.mu.Lock()
	delete(u.failures, addr)
	u.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: s.id, Path: "/", Expires: s.expires,
		MaxAge: int(u.opts.SessionTTL.Seconds()), HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	u.opts.Log.Info().Str("remote", r.RemoteAddr).Str("name", name).Msg("web UI: login")
	writeJSON(w, http.StatusOK, sessionInfo{Authenticated: true, LoginRequired: !fromLoopback(r), Loopback: fromLoopback(r),
		Name: s.name, CSRF: s.csrf, Expires: s.expires})
}

func (u *UI) handleLogout(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	if c, err := r.Cookie(CookieName); err == nil {
		if s := u.session(c.Value); s != nil {
			if subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderCSRF)), []byte(s.csrf)) != 1 {
				writeError(w, http.StatusForbidden, "csrf", "missing or wrong CSRF token: reload the page and try again")
				return
			}
			u.mu.Lock()
			delete(u.sessions, c.Value)
			u.mu.Unlock()
			u.opts.Log.Info().Str("remote", r.RemoteAddr).Str("name", s.name).Msg("web UI: logout")
		}
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// session returns the live session of a cookie value, or nil.
func (u *UI) session(id string) *session {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.sessions[id]
	if s == nil {
		return nil
	}
	if !u.opts.Now().Before(s.expires) {
		delete(u.sessions, id)
		return nil
	}
	return s
}

func (u *UI) newSession(name string) (*session, error) {
	id, err := randomToken()
	if err != nil {
		return nil, err
	}
	csrf, err := randomToken()
	if err != nil {
		return nil, err
	}
	now := u.opts.Now()
	s := &session{id: id, csrf: csrf, name: name, created: now, expires: now.Add(u.opts.SessionTTL)}
	u.mu.Lock()
	defer u.mu.Unlock()
	for k, old := range u.sessions {
		if !now.Before(old.expires) {
			delete(u.sessions, k)
		}
	}
	if len(u.sessions) >= maxSessions {
		var oldest *session
		for _, old := range u.sessions {
			if oldest == nil || old.created.Before(oldest.created) {
				oldest = old
			}
		}
		delete(u.sessions, oldest.id)
	}
	u.sessions[id] = s
	return s, nil
}

// lockedOut returns how long addr must wait before it may try again.
func (u *UI) lockedOut(addr string) time.Duration {
	u.mu.Lock()
	defer u.mu.Unlock()
	f := u.failures[addr]
	if f == nil {
		return 0
	}
	left := FailureWindow - u.opts.Now().Sub(f.first)
	if left <= 0 {
		delete(u.failures, addr)
		return 0
	}
	if f.n < u.opts.MaxFailures {
		return 0
	}
	return left
}

func (u *UI) fail(addr string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := u.opts.Now()
	if len(u.failures) > 10000 { // forget the stale ones before growing
		for k, f := range u.failures {
			if now.Sub(f.first) >= FailureWindow {
				delete(u.failures, k)
			}
		}
	}
	f := u.failures[addr]
	if f == nil || now.Sub(f.first) >= FailureWindow {
		f = &failures{first: now}
		u.failures[addr] = f
	}
	f.n++
}

func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// validName accepts 1 to 64 printable characters.
func validName(s string) error {
	if utf8.RuneCountInString(s) > maxNameLen || !utf8.ValidString(s) {
		return fmt.Errorf("name: at most %d characters of UTF-8", maxNameLen)
	}
	for _, c := range s {
		if !unicode.IsPrint(c) {
			return errors.New("name: printable characters only")
		}
	}
	return nil
}

// dropCookie removes the named cookie from r's Cookie header, keeping the
// others, so the API behind never sees the session.
func dropCookie(r *http.Request, name string) {
	var keep []string
	for _, c := range r.Cookies() {
		if c.Name != name {
			keep = append(keep, c.String())
		}
	}
	r.Header.Del("Cookie")
	if len(keep) > 0 {
		r.Header.Set("Cookie", strings.Join(keep, "; "))
	}
}

func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func fromLoopback(r *http.Request) bool {
	ip := net.ParseIP(clientAddr(r))
	return ip != nil && ip.IsLoopback()
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed; allowed: "+allow)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

func fsSub() (fs.FS, error) { return fs.Sub(static, "static") }
