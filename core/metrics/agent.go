package metrics

import (
	"net/http"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/openstarry/openstarry-edge/core/agent"
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
type Agent struct {
	now   func() time.Time
	start time.Time // owned by the runtime goroutine
	set   *vm.Set
	saves *vm.PrometheusHistogram
}

// NewAgent returns an empty Agent; now nil means time.Now.
func NewAgent(now func() time.Time) *Agent {
	if now == nil {
		now = time.Now
	}
	set := vm.NewSet()
	return &Agent{now: now, set: set, saves: set.NewPrometheusHistogramExt(SaveDuration, SaveBuckets)}
}

// BeforeSave is the runtime's BeforeSave hook.
func (m *Agent) BeforeSave(*agent.Snapshot) { m.start = m.now() }

// AfterSave is the runtime's AfterSave hook.
func (m *Agent) AfterSave(*agent.Snapshot) { m.Observe(m.now().Sub(m.start)) }

// Observe records one save's duration.
func (m *Agent) Observe(d time.Duration) { m.saves.Update(d.Seconds()) }

// ServeHTTP writes openstarry_agent_save_duration_seconds.
func (m *Agent) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", ContentType)
	m.set.WritePrometheus(w)
}
