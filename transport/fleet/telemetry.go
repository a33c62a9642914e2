package fleet

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// Telemetry is what a device publishes, retained, on
// {prefix}/{device}/telemetry: enough for a fleet view without asking it.
type Telemetry struct {
	Device        string           `json:"device"`
	Version       string           `json:"version"`
	Time          time.Time        `json:"time"`
	Started       time.Time        `json:"started"`
	UptimeSeconds int64            `json:"uptime_s"`
	Agents        []AgentTelemetry `json:"agents"`
	StoreBytes    int64            `json:"store_bytes"`     // the data directory's files
	DiskFreeBytes int64            `json:"disk_free_bytes"` // free to the service on its file system; -1 unknown
	Counters      map[string]int64 `json:"counters,omitempty"`
	// SessionsDamage counts the damaged parts of sessions.db the daemon's
	// scrubs found since it started; each agent's store has its own count.
	SessionsDamage uint64 `json:"sessions_db_damage,omitempty"`
}

// AgentTelemetry is one agent in Telemetry.
type AgentTelemetry struct {
	ID       string `json:"id"`
	Role     string `json:"role"`
	State    string `json:"state"`
	Restarts int    `json:"restarts"`
	Tick     uint64 `json:"tick,omitempty"`
	// StoreDamage counts the damaged parts of the agent's store its scrubs
	// found since it started (docs/storage-damage.md).
	StoreDamage uint64 `json:"store_damage,omitempty"`
	// The template it runs, and where the daemon found it; Degraded and
	// DegradedReason when that was the cache because the design layer
	// could not be used.
	Template        string `json:"template,omitempty"`
	TemplateVersion string `json:"template_version,omitempty"`
	TemplateSource  string `json:"template_source,omitempty"`
	Degraded        bool   `json:"degraded,omitempty"`
	DegradedReason  string `json:"degraded_reason,omitempty"`
	// Current is the task the agent has in hand, when it runs one.
	Current *control.CurrentTask `json:"current_task,omitempty"`
}

// TelemetryTopic is where a device's telemetry is retained.
func TelemetryTopic(prefix, device string) string { return prefix + "/" + device + "/telemetry" }

// Reporter publishes a device's telemetry every interval and whenever Poke
// is called (an agent changed state), at most once a second.
type Reporter struct {
	prefix, device string
	interval       time.Duration
	collect        func(ctx context.Context) Telemetry
	poke           chan struct{}
	mu             sync.Mutex
	client         paho.Client
}

// NewReporter returns a Reporter; collect gathers the figures.
func NewReporter(prefix, device string, interval time.Duration, collect func(ctx context.Context) Telemetry) *Reporter {
	if interval <= 0 {
		interval = time.Minute
	}
	return &Reporter{prefix: prefix, device: device, interval: interval, collect: collect, poke: make(chan struct{}, 1)}
}

// Attach gives the reporter its connection (call it on every connect) and
// publishes at once.
func (r *Reporter) Attach(c paho.Client) {
	r.mu.Lock()
	r.client = c
	r.mu.Unlock()
	r.Poke()
}

// Poke asks for a publication soon.
func (r *Reporter) Poke() {
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// Run publishes until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.poke:
			if wait := time.Second - time.Since(last); wait > 0 {
				select {
				case <-time.After(wait):
				case <-ctx.Done():
					return
				}
			}
		}
		last = time.Now()
		r.publish(ctx)
	}
}

func (r *Reporter) publish(ctx context.Context) {
	r.mu.Lock()
	c := r.client
	r.mu.Unlock()
	if c == nil || !c.IsConnectionOpen() {
		return
	}
	tm := r.collect(ctx)
	b, err := json.Marshal(tm)
	if err != nil {
		return
	}
	c.Publish(TelemetryTopic(r.prefix, r.device), 1, true, b)
}
