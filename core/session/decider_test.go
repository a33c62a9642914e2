package session_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	. "github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/sessionapi"
)

// TestDecidedBy: a decision records who took it — the decided_by of the
// body, else the web UI's user header, else the address it came from —
// with its time, in the row and in revision_history; it survives a
// reopening and a rebuild of sessions.db from the files; a bad name is
// refused.
func TestDecidedBy(t *testing.T) {
	ctx := context.Background()
	data := t.TempDir()
	logs := &logbuf.Buffer{}
	m := openManager(t, data, logs)
	m.SetAgents(newAgentsFake())
	v, err := m.CreateProject(ctx, plan(t, `{"name":"gates","tasks":[
		{"phase":1,"type":"a","input":"a","approval":true},
		{"phase":1,"type":"b","input":"b","approval":true},
		{"phase":1,"type":"c","input":"c","approval":true},
		{"phase":1,"type":"d","input":"d","approval":true}]}`))
	if err != nil {
		t.Fatal(err)
	}
	var aps []Approval
	wait.For(t, 10*time.Second, "four approvals", func() bool {
		aps, _ = m.Approvals(ctx, v.ID, ApprovalPending)
		return len(aps) == 4
	})
	mux := http.NewServeMux()
	sessionapi.Routes(mux, m, zerolog.Nop())
	post := func(id int64, body string, hdr ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", fmt.Sprintf("/approvals/%d", id), strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		return w
	}

	// Refused names change nothing.
	for _, bad := range []string{`"a\u0007b"`, `"` + strings.Repeat("x", 129) + `"`} {
		if w := post(aps[0].ID, `{"decision":"approve","decided_by":`+bad+`}`); w.Code != 400 || !strings.Contains(w.Body.String(), "decided_by") {
			t.Errorf("decided_by %s: %d %s", bad, w.Code, w.Body)
		}
	}

	want := map[int64]string{}
	for i, tc := range []struct {
		body string
		hdr  []string
		by   string
	}{
		{`{"decision":"approve","decided_by":" alice "}`, nil, "alice"},
		{`{"decision":"reject","feedback":"no"}`, []string{sessionapi.HeaderUser, "bob"}, "bob"},
		{`{"decision":"revise","feedback":"again","decided_by":"carol"}`, []string{sessionapi.HeaderUser, "bob"}, "carol"},
		{`{"decision":"approve"}`, nil, "http 192.0.2.1"}, // httptest's client address
	} {
		w := post(aps[i].ID, tc.body, tc.hdr...)
		if w.Code != 200 {
			t.Fatalf("decision %d: %d %s", i, w.Code, w.Body)
		}
		var a Approval
		if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
			t.Fatal(err)
		}
		if a.DecidedBy != tc.by || a.ResolvedAt == nil || len(a.RevisionHistory) != 1 || a.RevisionHistory[0].By != tc.by {
			t.Errorf("decision %d: decided_by %q, history %+v, want %q", i, a.DecidedBy, a.RevisionHistory, tc.by)
		}
		want[a.ID] = tc.by
	}
	if !strings.Contains(logs.String(), `"by":"alice"`) {
		t.Error("the decision's log line does not say who")
	}

	check := func(when string, m *Manager) {
		t.Helper()
		all, err := m.Approvals(ctx, v.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, a := range all {
			if by, ok := want[a.ID]; ok {
				got++
				if a.DecidedBy != by || a.ResolvedAt == nil {
					t.Errorf("%s: approval %d decided_by %q at %v, want %q", when, a.ID, a.DecidedBy, a.ResolvedAt, by)
				}
			}
		}
		if got != len(want) {
			t.Errorf("%s: %d of the %d decided approvals found", when, got, len(want))
		}
	}
	check("open", m)
	if err := m.Close(true); err != nil {
		t.Fatal(err)
	}
	m = openManager(t, data, logs)
	check("reopened", m)
	if err := m.Close(true); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"sessions.db", "sessions.db-wal", "sessions.db-shm"} {
		if err := os.Remove(filepath.Join(data, f)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}
	m = openManager(t, data, logs)
	defer m.Close(true)
	check("rebuilt from the files", m)
}
