package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/metrics"
)

// reporter says what the daemon and its agents are doing: the status of
// `openstarry status`, GET /status and GET /v1/status, GET /healthz, and
// GET /metrics (metrics.go). It owns no state: it reads the parts', each
// under its own lock, and asks the running agents' loopback APIs for their
// snapshots and metrics.
type reporter struct {
	version, revision string // Options.Version, Options.Revision
	data              string // absolute
	boot              *bootState
	super             *supervisor
	infra             *infraSet
	workers           *workers                       // the registry's pending handoffs
	httpd             *httpAPI                       // its address
	httpc             *http.Client                   // to the agents' loopback APIs
	sessions          func() (scrubs, damage uint64) // the scrubs of sessions.db (sessions.go)
}

// status describes the daemon and its agents; with snaps, each running
// agent is asked for its snapshot (tick, queue, outbox) in parallel.
func (rp *reporter) status(ctx context.Context, snaps bool) control.Status {
	ms := rp.super.sorted()
	st := control.Status{PID: os.Getpid(), Version: rp.version, Data: rp.data, HTTP: rp.httpd.address()}
	rp.boot.fill(&st)
	_, st.SessionsDamage = rp.sessions()
	st.Notice = BootNotice(rp.data)
	st.Agents = make([]control.AgentInfo, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		st.Agents[i] = m.info()
		if !snaps || st.Agents[i].State != control.StateRunning {
			continue
		}
		wg.Add(1)
		go func(a *control.AgentInfo) {
			defer wg.Done()
			rp.fillSnapshot(ctx, a)
		}(&st.Agents[i])
	}
	wg.Wait()
	return st
}

// BootNoticeFile is the file, in the data directory, where the image's
// first boot (packaging/image) writes what it could not do; the status
// shows it as Notice.
const BootNoticeFile = "boot-notice"

// BootNotice reads DATA/boot-notice: at most 4 KiB of it, trimmed; "" when
// there is none.
func BootNotice(data string) string {
	f, err := os.Open(filepath.Join(data, BootNoticeFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
}

// snapInfo is what status reads of an agent's snapshot.
type snapInfo struct {
	TickIndex uint64            `json:"tick_index"`
	Status    string            `json:"status"`
	Queue     []json.RawMessage `json:"event_queue_backup"`
	Outbox    []json.RawMessage `json:"outbox"`
	Memory    struct {
		History []agent.Message `json:"short_term_history"`
	} `json:"memory"`
}

func (rp *reporter) fillSnapshot(ctx context.Context, a *control.AgentInfo) {
	var s snapInfo
	if !rp.askAgent(ctx, a.Addr+"/agents/"+a.ID+"/snapshot", func(body io.Reader) error {
		return json.NewDecoder(io.LimitReader(body, 256<<20)).Decode(&s)
	}) {
		return
	}
	a.Snapshot, a.Tick, a.Queue, a.Outbox, a.SnapshotStatus = true, s.TickIndex, len(s.Queue), len(s.Outbox), s.Status
	rp.askAgent(ctx, a.Addr+"/metrics", func(body io.Reader) error {
		fams := metrics.Families(io.LimitReader(body, 4<<20), "openstarry_agent_store_")
		a.StoreDamage, a.StoreRepaired = counterOf(fams[metrics.StoreDamageTotal]), counterOf(fams[metrics.StoreRepairTotal])
		return nil
	})
	var cur *control.CurrentTask
	if rp.askAgent(ctx, a.Addr+"/agents/"+a.ID+"/current", func(body io.Reader) error {
		return json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(&cur)
	}) {
		a.Current = cur
	}
	for i := len(s.Memory.History) - 1; i >= 0; i-- {
		if m := s.Memory.History[i]; m.Role == "assistant" && m.TaskID != "" {
			a.LastTask, a.LastResult = m.TaskID, clipRunes(m.Content, 200)
			break
		}
	}
}

// counterOf returns the value of a family of one unlabelled sample, 0
// without one.
func counterOf(f *metrics.Family) uint64 {
	if f == nil || len(f.Lines) != 1 {
		return 0
	}
	fields := strings.Fields(f.Lines[0])
	if len(fields) < 2 {
		return 0
	}
	v, err := strconv.ParseFloat(fields[1], 64)
	if err != nil || v < 0 {
		return 0
	}
	return uint64(v)
}

// clipRunes cuts s to at most n characters, at a character boundary.
func clipRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}

// askAgent GETs url of an agent's loopback API, within 2 seconds, and
// hands a 200 answer's body to read; it reports whether both succeeded.
// Any other answer is drained and false.
func (rp *reporter) askAgent(ctx context.Context, url string, read func(body io.Reader) error) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return false
	}
	resp, err := rp.httpc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return false
	}
	return read(resp.Body) == nil
}

type health struct {
	Status string            `json:"status"` // ok, booting, degraded, stopping
	Master string            `json:"master"` // the master's state
	Agents map[string]string `json:"agents"` // id → state
	Infra  map[string]string `json:"infra,omitempty"`
	// StateStore is "ok", or "not durable: …" when a Save may not survive
	// a crash of the store's host (which does not make the daemon degraded).
	StateStore string `json:"state_store,omitempty"`
	// Templates says, per agent, which template it runs and where the
	// daemon found it; Degraded lists what booted from the cache because
	// the design layer could not be used (the daemon still answers 200:
	// it works, on the last good blueprint).
	Templates map[string]templateHealth `json:"templates,omitempty"`
	Degraded  []string                  `json:"degraded,omitempty"`
}

type templateHealth struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Source  string `json:"source,omitempty"`
}

// healthz serves GET /healthz: 200 when booted, the master runs and the
// infrastructure is up (or off by configuration); 503 otherwise.
func (rp *reporter) healthz(w http.ResponseWriter, _ *http.Request) {
	h := health{Status: "ok", Agents: map[string]string{}, Infra: map[string]string{}, Templates: map[string]templateHealth{}}
	for _, m := range rp.super.sorted() {
		st, _, _ := m.watch()
		h.Agents[m.id] = st
		if m.role == control.RoleMaster {
			h.Master = st
		}
		a := m.info()
		h.Templates[m.id] = templateHealth{Name: a.Template, Version: a.TemplateVersion, Source: a.Source}
		if a.Degraded {
			h.Degraded = append(h.Degraded, m.id+": "+a.DegradedReason)
		}
	}
	booted, stopping := rp.boot.isBooted(), rp.super.isStopping()
	up := rp.infra.started()
	if store := rp.boot.stateStore(); store != nil {
		h.StateStore = "ok"
		if !store.Durable {
			h.StateStore = "not durable: " + store.Warning
		}
	}
	degraded := h.Master != control.StateRunning
	for i, inf := range rp.infra.list {
		s := "up"
		if i >= len(up) || !up[i] {
			s, degraded = "down", true
		}
		if sr, ok := inf.(StatusReporter); ok {
			if st := sr.Status(); st.Off {
				s = "off"
			} else if !st.Up {
				s, degraded = "down", true
				if st.Detail != "" {
					s += ": " + st.Detail
				}
			}
		}
		h.Infra[inf.Name()] = s
	}
	code := http.StatusOK
	switch {
	case stopping:
		h.Status, code = "stopping", http.StatusServiceUnavailable
	case !booted:
		h.Status, code = "booting", http.StatusServiceUnavailable
	case degraded:
		h.Status, code = "degraded", http.StatusServiceUnavailable
	}
	httpx.Pretty(w, code, h)
}
