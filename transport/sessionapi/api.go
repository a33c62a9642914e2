// Package sessionapi is session continuity as the daemon runs it: seed
// 003's HTTP API (projects, sessions, resume, approvals, approaches,
// artifacts) on the daemon's listener, over core/session's Manager, and the
// plugin sessions.daemon (link.go), the daemon.SessionLink the wiring hands
// the daemon: the manager over the registered session store, this API, and
// the agents' session tools. The manager holds the logic, the store the
// rows; the daemon links none of them itself.
package sessionapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"os"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/session"
)

// Routes adds the session API to mux (the daemon's listener, which applies
// the token rule):
//
//	POST /projects                               create a project and its plan; 201
//	GET  /projects                               every project with its newest session
//	GET  /projects/{id}                          the project, its tasks with progress, its sessions
//	GET  /projects/{id}/sessions                 its sessions, oldest first
//	GET  /projects/{id}/sessions/{sid}           one session: row, checkpoint, tasks, approvals, approaches
//	POST /projects/{id}/sessions/{sid}/resume    resume an interrupted session; 201 with the child session
//	GET  /projects/{id}/sessions/{sid}/artifacts/{path}  a file of the session's artifacts/
//	GET  /projects/{id}/approvals[?status=S]     the project's approvals
//	GET  /projects/{id}/approaches               the project's approaches by kind
//	GET  /approvals[?status=S]                   approvals of every project
//	GET  /approvals/{id}                         one approval
//	POST /approvals/{id}                         decide: {"decision": "approve"|"reject"|"revise", "feedback": "..."}
//
// Errors are one line of JSON {"error": "...", "code": "..."}: 400 for a
// bad id or body, 404 for an unknown one, 409 for a resume of a session
// that is not interrupted or a decision on a decided approval, 405 for a
// wrong method.
func Routes(mux *http.ServeMux, sm *session.Manager, log zerolog.Logger) {
	m := &api{Manager: sm, log: log}
	mux.HandleFunc("POST /projects", m.postProject)
	mux.HandleFunc("GET /projects", m.getProjects)
	mux.HandleFunc("GET /projects/{id}", m.withProject(func(w http.ResponseWriter, r *http.Request, id string) {
		answer(w, r, http.StatusOK)(m.View(r.Context(), id))
	}))
	mux.HandleFunc("GET /projects/{id}/sessions", m.withProject(func(w http.ResponseWriter, r *http.Request, id string) {
		answer(w, r, http.StatusOK)(m.Sessions(r.Context(), id))
	}))
	mux.HandleFunc("GET /projects/{id}/sessions/{sid}", m.withSession(func(w http.ResponseWriter, r *http.Request, id, sid string) {
		answer(w, r, http.StatusOK)(m.SessionDetail(r.Context(), id, sid))
	}))
	mux.HandleFunc("POST /projects/{id}/sessions/{sid}/resume", m.withSession(func(w http.ResponseWriter, r *http.Request, id, sid string) {
		answer(w, r, http.StatusCreated)(m.Resume(r.Context(), id, sid))
	}))
	mux.HandleFunc("GET /projects/{id}/sessions/{sid}/artifacts/{path...}", m.withSession(m.getArtifact))
	mux.HandleFunc("GET /projects/{id}/approvals", m.withProject(func(w http.ResponseWriter, r *http.Request, id string) {
		answer(w, r, http.StatusOK)(m.Approvals(r.Context(), id, r.URL.Query().Get("status")))
	}))
	mux.HandleFunc("GET /projects/{id}/approaches", m.withProject(func(w http.ResponseWriter, r *http.Request, id string) {
		answer(w, r, http.StatusOK)(m.Approaches(r.Context(), id))
	}))
	mux.HandleFunc("GET /approvals", func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, http.StatusOK)(m.Approvals(r.Context(), "", r.URL.Query().Get("status")))
	})
	mux.HandleFunc("GET /approvals/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := session.ParseApprovalID(r.PathValue("id"))
		if err != nil {
			WriteError(w, err)
			return
		}
		answer(w, r, http.StatusOK)(m.Store().Approval(r.Context(), id))
	})
	mux.HandleFunc("POST /approvals/{id}", m.postDecision)
}

// api is the handlers over one manager.
type api struct {
	*session.Manager
	log zerolog.Logger
}

func (m *api) postProject(w http.ResponseWriter, r *http.Request) {
	req, err := session.DecodeCreateRequest(r.Body)
	if err != nil {
		m.log.Warn().Err(err).Str("remote", r.RemoteAddr).Msg("POST /projects refused")
		WriteError(w, err)
		return
	}
	answer(w, r, http.StatusCreated)(m.CreateProject(r.Context(), req))
}

func (m *api) getProjects(w http.ResponseWriter, r *http.Request) {
	answer(w, r, http.StatusOK)(m.Store().Projects(r.Context()))
}

// MaxInlineArtifact is the largest artifact served to be shown in the
// browser (text only); a larger one, or one that is not text, is served as
// a download.
const MaxInlineArtifact = 1 << 20

// getArtifact serves one file of a session's artifacts directory, for a
// reviewer to open what an approval names. The path is relative to
// artifacts/ and may name nothing outside it: no "..", no absolute path,
// and no symbolic link out of it (os.Root). Text (UTF-8, up to
// MaxInlineArtifact) is served inline as text/plain, anything else as an
// attachment; never as a type a browser would run.
func (m *api) getArtifact(w http.ResponseWriter, r *http.Request, id, sid string) {
	if _, err := m.Session(r.Context(), id, sid); err != nil {
		WriteError(w, err)
		return
	}
	rel := r.PathValue("path")
	if !fs.ValidPath(rel) || rel == "." || strings.Contains(rel, "\\") {
		WriteError(w, fmt.Errorf("%w: artifact path %q: want a relative path inside the session's artifacts directory", session.ErrBadRequest, session.ClipID(rel)))
		return
	}
	notFound := fmt.Errorf("artifact %s of session %s: %w", session.ClipID(rel), sid, session.ErrNotFound)
	root, err := os.OpenRoot(m.Layout().Artifacts(id, sid))
	if err != nil {
		WriteError(w, notFound)
		return
	}
	defer root.Close()
	f, err := root.Open(rel)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn().Err(err).Str("session", sid).Str("path", rel).Msg("artifact refused")
		}
		WriteError(w, notFound)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		WriteError(w, notFound)
		return
	}
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		WriteError(w, err)
		return
	}
	name := path.Base(rel)
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("Cache-Control", "no-store")
	if st.Size() <= MaxInlineArtifact && isText(head) {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": name}))
	} else {
		h.Set("Content-Type", "application/octet-stream")
		h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": name}))
	}
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// isText reports whether a file's first bytes look like text: UTF-8 (a
// rune cut at the end allowed) without NUL.
func isText(head []byte) bool {
	if bytes.IndexByte(head, 0) >= 0 {
		return false
	}
	for i := 0; i < 3 && len(head) > 0 && !utf8.Valid(head); i++ {
		head = head[:len(head)-1]
	}
	return utf8.Valid(head)
}

// HeaderUser names the person a browser session of the web UI was opened
// for (transport/webui sets it); a decision without decided_by is
// recorded under that name.
const HeaderUser = "X-OpenStarry-User"

func (m *api) postDecision(w http.ResponseWriter, r *http.Request) {
	id, err := session.ParseApprovalID(r.PathValue("id"))
	if err != nil {
		WriteError(w, err)
		return
	}
	d, status, err := session.DecodeDecision(r.Body)
	if err != nil {
		m.log.Warn().Err(err).Int64("approval", id).Msg("decision refused")
		WriteError(w, err)
		return
	}
	by := d.DecidedBy
	if by == "" {
		by = strings.TrimSpace(r.Header.Get(HeaderUser))
		if session.ValidDecider(by) != nil {
			by = ""
		}
	}
	if by == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		by = "http " + host
	}
	answer(w, r, http.StatusOK)(m.DecideBy(r.Context(), id, status, d.Feedback, by))
}

func (m *api) withProject(h func(w http.ResponseWriter, r *http.Request, id string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := session.ValidateProjectID(id); err != nil {
			WriteError(w, err)
			return
		}
		h(w, r, id)
	}
}

func (m *api) withSession(h func(w http.ResponseWriter, r *http.Request, id, sid string)) http.HandlerFunc {
	return m.withProject(func(w http.ResponseWriter, r *http.Request, id string) {
		sid := r.PathValue("sid")
		if err := session.ValidateSessionID(sid); err != nil {
			WriteError(w, err)
			return
		}
		h(w, r, id, sid)
	})
}

// answer writes v with status, or the error.
func answer(w http.ResponseWriter, _ *http.Request, status int) func(any, error) {
	return func(v any, err error) {
		if err != nil {
			WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
	}
}

// WriteError writes err as one line of JSON {"error", "code"}.
func WriteError(w http.ResponseWriter, err error) {
	status, code := session.StatusOf(err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"error": strings.ReplaceAll(err.Error(), "\n", " "), "code": code})
	_, _ = w.Write(append(b, '\n'))
}
