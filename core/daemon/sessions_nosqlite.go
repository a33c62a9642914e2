//go:build nosqlite

package daemon

import (
	"context"
	"net/http"
	"os"
	"path/filepath"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// A build with -tags nosqlite has no session continuity: sessions.db is a
// SQLite file, and leaving SQLite out is what makes the small build small.
// The boot journal (DATA/run/boot.json) is kept; every entry point to
// sessions (the seed-003 HTTP API, the agents' session tools) answers
// errNoSessions with 501.

// errNoSessions names the build to whoever asks for session continuity.
var errNoSessions = plugin.NotCompiledIn("session continuity", "nosqlite")

// codeNotCompiledIn is the error code of a feature this build left out.
const codeNotCompiledIn = "not_compiled_in"

// sessionManager is nothing in this build: d.sess stays nil.
type sessionManager = *struct{}

// openSessions is boot phase 1's state check without sessions: the boot
// journal only. A sessions.db left by a standard build is not touched.
func (d *Daemon) openSessions(context.Context) error {
	if _, err := d.openJournal(); err != nil {
		return err
	}
	ev := d.log.Info()
	if _, err := os.Stat(filepath.Join(d.data, "sessions.db")); err == nil {
		ev = d.log.Warn().Str("sessions_db", filepath.Join(d.data, "sessions.db"))
	}
	ev.Msg(errNoSessions.Error())
	return nil
}

func (d *Daemon) startSessions(context.Context) {}

func (d *Daemon) pauseSessions() {}

// closeSessions records the clean stop in the journal.
func (d *Daemon) closeSessions(clean bool) {
	if clean {
		d.journalCleanStop()
	}
}

// sessionRoutes answers every route of the session API with errNoSessions.
func (d *Daemon) sessionRoutes(mux *http.ServeMux) {
	for _, p := range []string{"/projects", "/projects/", "/approvals", "/approvals/"} {
		mux.HandleFunc(p, func(w http.ResponseWriter, _ *http.Request) { writeNoSessions(w) })
	}
}

// handleSessionTool refuses the agents' session tools (approval_request,
// approach_record, task_update).
func (d *Daemon) handleSessionTool(w http.ResponseWriter, r *http.Request) {
	caller, _ := callerAgent(r)
	d.log.Warn().Str("agent", caller).Str("op", r.PathValue("op")).Msg("session tool request refused: " + errNoSessions.Error())
	writeNoSessions(w)
}

func writeNoSessions(w http.ResponseWriter) {
	writeError(w, &control.Error{Status: http.StatusNotImplemented, Code: codeNotCompiledIn, Msg: errNoSessions.Error()})
}
