package metrics

import (
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// SaveBuckets are the upper bounds, in seconds, of the save latency
// histogram: an fsync on an SD card takes milliseconds to hundreds of them.
var SaveBuckets = []float64{0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5}

// SaveDuration is the agent process's histogram of its snapshot saves.
const SaveDuration = "openstarry_agent_save_duration_seconds"

// Agent measures one agent process's saves and serves them as GET /metrics
// on the agent's API, which the daemon scrapes and labels. BeforeSave and
// AfterSave are the kernel's save hooks (they run on the runtime's
// goroutine); Observe and ServeHTTP run on any.
//
// The histogram is the one family this package writes itself: the version
// of the metrics library that prints nothing at start-up (see Page) has no
// Prometheus histogram with le buckets.
type Agent struct {
	now   func() time.Time
	start time.Time // owned by the runtime goroutine

	mu     sync.Mutex // guards counts, sum, n and scrub
	counts []uint64   // per SaveBuckets bound, not cumulative; the last is +Inf
	sum    float64
	n      uint64
	scrub  scrubCounts
}

// scrubCounts are the counters of the agent's scrubs of its store.
type scrubCounts struct {
	runs, errors, bytes, damage, repaired uint64
	last                                  float64 // unix seconds of the last scrub that checked, 0: none
}

// Scrub families, served by Agent.ServeHTTP.
const (
	ScrubsTotal      = "openstarry_agent_scrubs_total"
	ScrubErrorsTotal = "openstarry_agent_scrub_errors_total"
	ScrubBytesTotal  = "openstarry_agent_scrub_bytes_total"
	StoreDamageTotal = "openstarry_agent_store_damage_total"
	StoreRepairTotal = "openstarry_agent_store_repaired_total"
	ScrubLastTime    = "openstarry_agent_scrub_last_timestamp_seconds"
)

// ObserveScrub counts one scrub of the agent's store (host's OnScrub).
func (m *Agent) ObserveScrub(rep plugin.ScrubReport, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.scrub.runs++
	if err != nil {
		m.scrub.errors++
		return
	}
	m.scrub.bytes += uint64(rep.Bytes)
	m.scrub.damage += uint64(len(rep.Damage))
	m.scrub.repaired += uint64(len(rep.Repaired))
	m.scrub.last = float64(m.now().UnixMilli()) / 1000
}

// NewAgent returns an empty Agent; now nil means time.Now.
func NewAgent(now func() time.Time) *Agent {
	if now == nil {
		now = time.Now
	}
	return &Agent{now: now, counts: make([]uint64, len(SaveBuckets)+1)}
}

// BeforeSave is the runtime's BeforeSave hook.
func (m *Agent) BeforeSave(*agent.Snapshot) { m.start = m.now() }

// AfterSave is the runtime's AfterSave hook.
func (m *Agent) AfterSave(*agent.Snapshot) { m.Observe(m.now().Sub(m.start)) }

// Observe records one save's duration.
func (m *Agent) Observe(d time.Duration) {
	s := d.Seconds()
	i := sort.SearchFloat64s(SaveBuckets, s) // the first bound ≥ s: le is inclusive
	m.mu.Lock()
	m.counts[i]++
	m.sum += s
	m.n++
	m.mu.Unlock()
}

// ServeHTTP writes openstarry_agent_save_duration_seconds.
func (m *Agent) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	m.mu.Lock()
	counts := append([]uint64(nil), m.counts...)
	sum, n, sc := m.sum, m.n, m.scrub
	m.mu.Unlock()
	var b strings.Builder
	b.WriteString("# HELP " + SaveDuration + " Duration of the agent's snapshot saves (durable when they return).\n")
	b.WriteString("# TYPE " + SaveDuration + " histogram\n")
	var cum uint64
	for i, ub := range SaveBuckets {
		cum += counts[i]
		b.WriteString(Name(SaveDuration+"_bucket", "le", strconv.FormatFloat(ub, 'g', -1, 64)) + " " + strconv.FormatUint(cum, 10) + "\n")
	}
	b.WriteString(Name(SaveDuration+"_bucket", "le", "+Inf") + " " + strconv.FormatUint(n, 10) + "\n")
	b.WriteString(SaveDuration + "_sum " + strconv.FormatFloat(sum, 'g', -1, 64) + "\n")
	b.WriteString(SaveDuration + "_count " + strconv.FormatUint(n, 10) + "\n")
	for _, f := range []struct {
		name, typ, help string
		v               float64
	}{
		{ScrubsTotal, "counter", "Scrubs of the agent's store (its files read back from the disk).", float64(sc.runs)},
		{ScrubErrorsTotal, "counter", "Scrubs that could not check the store.", float64(sc.errors)},
		{ScrubBytesTotal, "counter", "Bytes of the store's files the scrubs read back.", float64(sc.bytes)},
		{StoreDamageTotal, "counter", "Damaged parts of the store's files the scrubs found.", float64(sc.damage)},
		{StoreRepairTotal, "counter", "Damaged parts the scrubs rewrote from a good copy.", float64(sc.repaired)},
		{ScrubLastTime, "gauge", "When the last scrub that checked the store ended (0: none yet).", sc.last},
	} {
		b.WriteString("# HELP " + f.name + " " + f.help + "\n# TYPE " + f.name + " " + f.typ + "\n")
		b.WriteString(f.name + " " + strconv.FormatFloat(f.v, 'g', -1, 64) + "\n")
	}
	w.Header().Set("Content-Type", ContentType)
	_, _ = w.Write([]byte(b.String()))
}
