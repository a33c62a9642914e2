package daemon

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// allStates are the states exported one-hot by openstarry_agent_state.
var allStates = []string{control.StateStarting, control.StateRunning, control.StateBackoff,
	control.StateCrashloop, control.StateStopping, control.StateStopped}

// metrics writes the Prometheus text exposition (version 0.0.4), by hand:
// the daemon, its infrastructure, and per agent its process state,
// restarts, and from its snapshot its ticks, queue and outbox. Agents that
// serve GET /metrics themselves (the save latency histogram) have those
// families added with an agent label.
func (d *Daemon) metrics(w http.ResponseWriter, r *http.Request) {
	st := d.status(r.Context(), true)
	var p promText
	p.family("openstarry_build_info", "gauge", "Version of the daemon.")
	p.sample("openstarry_build_info", 1, "version", d.o.Version)
	p.family("openstarry_daemon_start_time_seconds", "gauge", "Start time of the daemon, Unix seconds.")
	p.sample("openstarry_daemon_start_time_seconds", float64(d.started.UnixMilli())/1000)
	p.family("openstarry_boot_phase_duration_seconds", "gauge", "Duration of each boot phase of the last boot.")
	for _, ph := range st.Phases {
		p.sample("openstarry_boot_phase_duration_seconds", ph.DurationMs/1000, "phase", strconv.Itoa(ph.N), "name", ph.Name)
	}
	d.mu.Lock()
	up := append([]bool(nil), d.infraUp...)
	d.mu.Unlock()
	p.family("openstarry_infra_up", "gauge", "1 when the infrastructure plugin is up (the embedded broker, the hub connection).")
	gauges := map[string][][2]any{}
	for i, inf := range d.o.Infra {
		v := i < len(up) && up[i]
		if sr, ok := inf.(StatusReporter); ok {
			s := sr.Status()
			v = v && s.Up
			for k, g := range s.Gauges {
				gauges[k] = append(gauges[k], [2]any{inf.Name(), g})
			}
		}
		p.sample("openstarry_infra_up", b2f(v), "infra", inf.Name())
	}
	for _, k := range sortedKeys(gauges) {
		name := "openstarry_infra_" + k
		p.family(name, "gauge", "Reported by the infrastructure plugin.")
		for _, g := range gauges[k] {
			p.sample(name, g[1].(float64), "infra", g[0].(string))
		}
	}
	p.family("openstarry_worker_handoffs_pending", "gauge", "Tasks handed to workers whose results have not reached their requesters yet.")
	p.sample("openstarry_worker_handoffs_pending", float64(len(d.reg.snapshot().Handoffs)))
	p.family("openstarry_interrupted_agents", "gauge", "Agents whose snapshot was not closed cleanly at boot.")
	p.sample("openstarry_interrupted_agents", float64(len(st.Interrupted)))

	type fam struct {
		name, typ, help string
		v               func(a *control.AgentInfo) (float64, bool)
	}
	for _, f := range []fam{
		{"openstarry_agent_up", "gauge", "1 when the agent's process runs and listens.", func(a *control.AgentInfo) (float64, bool) {
			return b2f(a.State == control.StateRunning), true
		}},
		{"openstarry_agent_restarts_total", "counter", "Restarts of the agent's process since the daemon started.", func(a *control.AgentInfo) (float64, bool) {
			return float64(a.Restarts), true
		}},
		{"openstarry_agent_ticks_total", "counter", "tick_index of the agent's snapshot.", func(a *control.AgentInfo) (float64, bool) {
			return float64(a.Tick), a.Snapshot
		}},
		{"openstarry_agent_queue_depth", "gauge", "Events in the agent's event_queue_backup.", func(a *control.AgentInfo) (float64, bool) {
			return float64(a.Queue), a.Snapshot
		}},
		{"openstarry_agent_outbox_depth", "gauge", "Results saved but not yet confirmed delivered.", func(a *control.AgentInfo) (float64, bool) {
			return float64(a.Outbox), a.Snapshot
		}},
	} {
		p.family(f.name, f.typ, f.help)
		for i := range st.Agents {
			a := &st.Agents[i]
			if v, ok := f.v(a); ok {
				p.sample(f.name, v, "agent", a.ID, "role", a.Role, "template", a.Template)
			}
		}
	}
	p.family("openstarry_agent_state", "gauge", "1 for the agent's current process state.")
	for _, a := range st.Agents {
		for _, s := range allStates {
			p.sample("openstarry_agent_state", b2f(a.State == s), "agent", a.ID, "state", s)
		}
	}
	p.family("openstarry_agent_ready_seconds", "gauge", "Time from spawn to hydrated and listening, last start.")
	for _, m := range d.sortedMembers() {
		m.mu.Lock()
		rd := m.readyDur
		m.mu.Unlock()
		if rd > 0 {
			p.sample("openstarry_agent_ready_seconds", rd.Seconds(), "agent", m.id)
		}
	}
	d.agentMetrics(r.Context(), st.Agents, &p)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(p.buf.Bytes())
}

// agentMetrics scrapes GET /metrics of every running agent (if it serves
// one) and adds its families with an agent label.
func (d *Daemon) agentMetrics(ctx context.Context, agents []control.AgentInfo, p *promText) {
	type scraped struct {
		agent string
		fams  map[string]*childFamily
	}
	var (
		mu  sync.Mutex
		all []scraped
		wg  sync.WaitGroup
	)
	for _, a := range agents {
		if a.State != control.StateRunning || a.Addr == "" {
			continue
		}
		wg.Add(1)
		go func(a control.AgentInfo) {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, "GET", a.Addr+"/metrics", nil)
			if err != nil {
				return
			}
			resp, err := d.httpc.Do(req)
			if err != nil {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
				return
			}
			fams := parseChildMetrics(io.LimitReader(resp.Body, 4<<20))
			mu.Lock()
			all = append(all, scraped{a.ID, fams})
			mu.Unlock()
		}(a)
	}
	wg.Wait()
	sort.Slice(all, func(i, j int) bool { return all[i].agent < all[j].agent })
	names := map[string]*childFamily{}
	for _, s := range all {
		for n, f := range s.fams {
			if names[n] == nil {
				names[n] = f
			}
		}
	}
	for _, n := range sortedKeys(names) {
		p.family(n, names[n].typ, names[n].help)
		for _, s := range all {
			if f := s.fams[n]; f != nil {
				for _, l := range f.lines {
					p.buf.WriteString(addLabel(l, "agent", s.agent))
					p.buf.WriteByte('\n')
				}
			}
		}
	}
}

type childFamily struct {
	typ, help string
	lines     []string
}

// parseChildMetrics groups an agent's exposition by family. Only
// openstarry_agent_* families are taken.
func parseChildMetrics(r io.Reader) map[string]*childFamily {
	out := map[string]*childFamily{}
	get := func(n string) *childFamily {
		if out[n] == nil {
			out[n] = &childFamily{typ: "untyped"}
		}
		return out[n]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if n, t, ok := strings.Cut(rest, " "); ok && strings.HasPrefix(n, "openstarry_agent_") {
				get(n).typ = t
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			if n, h, ok := strings.Cut(rest, " "); ok && strings.HasPrefix(n, "openstarry_agent_") {
				get(n).help = h
			}
			continue
		}
		if line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !strings.HasPrefix(name, "openstarry_agent_") {
			continue
		}
		fam := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if f, ok := out[base]; ok && (f.typ == "histogram" || f.typ == "summary") {
					fam = base
				}
			}
		}
		get(fam).lines = append(get(fam).lines, line)
	}
	return out
}

// addLabel inserts k="v" first in a sample line's labels.
func addLabel(line, k, v string) string {
	lbl := k + `="` + escapeLabel(v) + `"`
	if i := strings.IndexByte(line, '{'); i >= 0 {
		if strings.HasPrefix(line[i+1:], "}") {
			return line[:i+1] + lbl + line[i+1:]
		}
		return line[:i+1] + lbl + "," + line[i+1:]
	}
	i := strings.IndexByte(line, ' ')
	if i < 0 {
		return line
	}
	return line[:i] + "{" + lbl + "}" + line[i:]
}

// promText builds an exposition.
type promText struct {
	buf bytes.Buffer
}

func (p *promText) family(name, typ, help string) {
	fmt.Fprintf(&p.buf, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
}

// sample writes one sample; labels are name, value pairs.
func (p *promText) sample(name string, v float64, labels ...string) {
	p.buf.WriteString(name)
	if len(labels) > 0 {
		p.buf.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				p.buf.WriteByte(',')
			}
			p.buf.WriteString(labels[i])
			p.buf.WriteString(`="`)
			p.buf.WriteString(escapeLabel(labels[i+1]))
			p.buf.WriteByte('"')
		}
		p.buf.WriteByte('}')
	}
	p.buf.WriteByte(' ')
	p.buf.WriteString(formatFloat(v))
	p.buf.WriteByte('\n')
}

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

func escapeLabel(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SaveBuckets are the upper bounds, in seconds, of the save latency
// histogram: an fsync on an SD card takes milliseconds to hundreds of them.
var SaveBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// AgentMetrics measures one agent process's saves and serves them as
// GET /metrics on the agent's API, which the daemon scrapes and labels.
// BeforeSave and AfterSave are the kernel's save hooks (they run on the
// runtime's goroutine); ServeHTTP runs on any.
type AgentMetrics struct {
	now func() time.Time

	start time.Time // owned by the runtime goroutine

	mu     sync.Mutex // guards counts, sum, n
	counts []uint64   // per SaveBuckets bound, not cumulative
	sum    float64
	n      uint64
}

// NewAgentMetrics returns an empty AgentMetrics; now nil means time.Now.
func NewAgentMetrics(now func() time.Time) *AgentMetrics {
	if now == nil {
		now = time.Now
	}
	return &AgentMetrics{now: now, counts: make([]uint64, len(SaveBuckets)+1)}
}

// BeforeSave is the runtime's BeforeSave hook.
func (m *AgentMetrics) BeforeSave(*agent.Snapshot) { m.start = m.now() }

// AfterSave is the runtime's AfterSave hook.
func (m *AgentMetrics) AfterSave(*agent.Snapshot) { m.Observe(m.now().Sub(m.start)) }

// Observe records one save's duration.
func (m *AgentMetrics) Observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(SaveBuckets, s)
	m.mu.Lock()
	m.counts[i]++
	m.sum += s
	m.n++
	m.mu.Unlock()
}

// ServeHTTP writes openstarry_agent_save_duration_seconds.
func (m *AgentMetrics) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	counts := append([]uint64(nil), m.counts...)
	sum, n := m.sum, m.n
	m.mu.Unlock()
	var p promText
	const name = "openstarry_agent_save_duration_seconds"
	p.family(name, "histogram", "Duration of the agent's snapshot saves (durable when they return).")
	var cum uint64
	for i, b := range SaveBuckets {
		cum += counts[i]
		p.sample(name+"_bucket", float64(cum), "le", formatFloat(b))
	}
	p.sample(name+"_bucket", float64(n), "le", "+Inf")
	p.sample(name+"_sum", sum)
	p.sample(name+"_count", float64(n))
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(p.buf.Bytes())
}
