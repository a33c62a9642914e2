package daemon

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/metrics"
)

// allStates are the states exported one-hot by openstarry_agent_state.
var allStates = []string{control.StateStarting, control.StateRunning, control.StateBackoff,
	control.StateCrashloop, control.StateStopping, control.StateStopped}

// metrics serves GET /metrics (core/metrics writes it): the daemon, its
// infrastructure, per agent its process state, restarts, and from its
// snapshot its ticks, queue and outbox; the Go runtime and the daemon's
// process. Agents that serve GET /metrics themselves (the save latency
// histogram) have those families added with an agent label.
func (rp *reporter) metrics(w http.ResponseWriter, r *http.Request) {
	st := rp.status(r.Context(), true)
	p := metrics.NewPage()
	p.BuildInfo(rp.version, rp.revision)
	p.Gauge("openstarry_daemon_start_time_seconds", float64(st.Started.UnixMilli())/1000)
	for _, ph := range st.Phases {
		p.Gauge("openstarry_boot_phase_duration_seconds", ph.DurationMs/1000, "phase", strconv.Itoa(ph.N), "name", ph.Name)
	}
	up := rp.infra.started()
	for i, inf := range rp.infra.list {
		v, off := i < len(up) && up[i], false
		if sr, ok := inf.(StatusReporter); ok {
			s := sr.Status()
			v, off = v && s.Up, s.Off
			for k, g := range s.Gauges {
				p.Gauge("openstarry_infra_"+k, g, "infra", inf.Name())
			}
		}
		// An infrastructure turned off is neither up nor down: it has no
		// openstarry_infra_up (an alert on up == 0 must not fire for it).
		p.Gauge("openstarry_infra_enabled", b2f(!off), "infra", inf.Name())
		if !off {
			p.Gauge("openstarry_infra_up", b2f(v), "infra", inf.Name())
		}
	}
	p.Gauge("openstarry_worker_handoffs_pending", float64(len(rp.workers.reg.snapshot().Handoffs)))
	p.Gauge("openstarry_interrupted_agents", float64(len(st.Interrupted)))
	scrubs, _ := rp.sessions()
	p.Counter("openstarry_sessions_db_scrubs_total", scrubs)
	p.Counter("openstarry_sessions_db_damage_total", st.SessionsDamage)
	for _, a := range st.Agents {
		l := []string{"agent", a.ID, "role", a.Role, "template", a.Template}
		p.Gauge("openstarry_agent_up", b2f(a.State == control.StateRunning), l...)
		p.Counter("openstarry_agent_restarts_total", uint64(a.Restarts), l...)
		if a.Snapshot {
			p.Counter("openstarry_agent_ticks_total", a.Tick, l...)
			p.Gauge("openstarry_agent_queue_depth", float64(a.Queue), l...)
			p.Gauge("openstarry_agent_outbox_depth", float64(a.Outbox), l...)
		}
		for _, s := range allStates {
			p.Gauge("openstarry_agent_state", b2f(a.State == s), "agent", a.ID, "state", s)
		}
	}
	for _, m := range rp.super.sorted() {
		if rd := m.ready(); rd > 0 {
			p.Gauge("openstarry_agent_ready_seconds", rd.Seconds(), "agent", m.id)
		}
	}
	agents := rp.agentMetrics(r.Context(), st.Agents)
	p.Then(func(w io.Writer) { metrics.WriteLabelled(w, "agent", agents) })
	p.Runtime()
	w.Header().Set("Content-Type", metrics.ContentType)
	p.Render(w)
}

// agentMetrics scrapes GET /metrics of every running agent (if it serves
// one) and returns its openstarry_agent_* families.
func (rp *reporter) agentMetrics(ctx context.Context, agents []control.AgentInfo) []metrics.Labelled {
	var (
		mu  sync.Mutex
		all []metrics.Labelled
		wg  sync.WaitGroup
	)
	for _, a := range agents {
		if a.State != control.StateRunning || a.Addr == "" {
			continue
		}
		wg.Add(1)
		go func(a control.AgentInfo) {
			defer wg.Done()
			var fams map[string]*metrics.Family
			if !rp.askAgent(ctx, a.Addr+"/metrics", func(body io.Reader) error {
				fams = metrics.Families(io.LimitReader(body, 4<<20), "openstarry_agent_")
				return nil
			}) {
				return
			}
			mu.Lock()
			all = append(all, metrics.Labelled{Value: a.ID, Families: fams})
			mu.Unlock()
		}(a)
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].Value < all[j].Value })
	return all
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
