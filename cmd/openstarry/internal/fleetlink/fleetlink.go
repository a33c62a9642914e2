// Package fleetlink is the daemon's side of the fleet, riding on its MQTT
// connection: the hub's signed commands, carried out through the daemon's
// own control API (Ops); the device's retained telemetry; and the outcome
// of the last self-update (Link). The operator's side is transport/fleet
// and the fleet commands.
package fleetlink

import (
	"context"
	"crypto/ed25519"
	"path/filepath"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/logx"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// Updater is the daemon's side of a self-update (updater.Daemon): the hub's
// update command installs through it, and it reports the outcome on every
// connect.
type Updater interface {
	Update(ctx context.Context, from, commandID string, rollback bool) (any, error)
	AfterUpdate()
	Attach(c paho.Client, prefix, device string)
}

// Ops carries out the hub's signed commands through the daemon's own
// control API, with the operator's token, as `openstarry status` and
// `openstarry agent` do on the device.
type Ops struct {
	cfg     *config.Config
	ring    *logx.Ring
	upd     Updater
	version string
}

// NewOps returns the operations of the daemon that runs with cfg: ring
// holds its last log lines (logs.tail), upd installs updates, and version
// is the running one (the telemetry's).
func NewOps(cfg *config.Config, ring *logx.Ring, upd Updater, version string) Ops {
	return Ops{cfg: cfg, ring: ring, upd: upd, version: version}
}

// Update installs a signed binary (the hub's update command).
func (o Ops) Update(ctx context.Context, url, commandID string, rollback bool) (any, error) {
	return o.upd.Update(ctx, url, commandID, rollback)
}

// AfterUpdate restarts the daemon into the installed update.
func (o Ops) AfterUpdate() { o.upd.AfterUpdate() }

func (o Ops) client() (*control.Client, error) { return control.Discover(o.cfg.Data) }

func (o Ops) Status(ctx context.Context) (any, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

func (o Ops) Restart(ctx context.Context, id string) (any, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Restart(ctx, id)
}

// Start starts a stopped agent: for the daemon that is a restart.
func (o Ops) Start(ctx context.Context, id string) (any, error) { return o.Restart(ctx, id) }

func (o Ops) Stop(ctx context.Context, id string) (any, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Stop(ctx, id)
}

func (o Ops) LogsTail(n int) []string { return o.ring.Tail(n) }

func (o Ops) Config() any { return o.cfg.Effective() }

// telemetry gathers the device's figures for its retained telemetry.
func (o Ops) telemetry(device string, started time.Time, counters func() map[string]int64) func(ctx context.Context) fleet.Telemetry {
	return func(ctx context.Context) fleet.Telemetry {
		now := time.Now()
		t := fleet.Telemetry{Device: device, Version: o.version, Time: now.UTC(), Started: started.UTC(),
			UptimeSeconds: int64(now.Sub(started).Seconds()), Agents: []fleet.AgentTelemetry{},
			StoreBytes: fleet.DirSize(o.cfg.Data), DiskFreeBytes: fleet.DiskFree(o.cfg.Data), Counters: counters()}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if st, err := o.Status(ctx); err == nil {
			t.SessionsDamage = st.(*control.Status).SessionsDamage
			for _, a := range st.(*control.Status).Agents {
				t.Agents = append(t.Agents, fleet.AgentTelemetry{ID: a.ID, Role: a.Role, State: a.State, Restarts: a.Restarts, Tick: a.Tick,
					Template: a.Template, TemplateVersion: a.TemplateVersion, TemplateSource: a.Source,
					Degraded: a.Degraded, DegradedReason: a.DegradedReason, Current: a.Current,
					StoreDamage: a.StoreDamage})
			}
		}
		return t
	}
}

// NoncesPath is the file of the command nonces the device obeyed.
func NoncesPath(cfg *config.Config) string { return filepath.Join(cfg.Data, "fleet-nonces.json") }

// Link puts the hub's signed commands, the device's telemetry and the
// last update's outcome on the daemon's MQTT connection.
type Link struct {
	dev            *fleet.Device
	rep            *fleet.Reporter
	upd            Updater
	prefix, device string
}

// New links the fleet to the daemon's MQTT infrastructure mi: the device
// obeys the commands signed by one of keys (design.trusted_keys) and
// carries them out with ops.
func New(cfg *config.Config, ops Ops, mi *mqtt.Infra, keys []ed25519.PublicKey, log zerolog.Logger) (Link, error) {
	nonces, err := fleet.OpenNonces(NoncesPath(cfg))
	if err != nil {
		return Link{}, err
	}
	prefix, device := cfg.MQTT.TopicPrefix, mi.Device()
	return Link{
		upd: ops.upd, prefix: prefix, device: device,
		dev: fleet.NewDevice(fleet.DeviceConfig{Prefix: prefix, Device: device, Trusted: keys,
			Nonces: nonces, Ops: ops, Log: log.With().Str("component", "fleet").Logger()}),
		rep: fleet.NewReporter(prefix, device, cfg.MQTT.TelemetryInterval,
			ops.telemetry(device, time.Now(), func() map[string]int64 {
				return map[string]int64{"mqtt_reconnects": mi.Reconnects()}
			})),
	}, nil
}

// Attach subscribes to the device's commands, publishes its telemetry and
// reports the last update's outcome; it runs on every connect.
func (l Link) Attach(c paho.Client) {
	l.dev.Subscribe(c)
	l.rep.Attach(c)
	l.upd.Attach(c, l.prefix, l.device)
}
func (l Link) Run(ctx context.Context) { l.rep.Run(ctx) }
func (l Link) Changed()                { l.rep.Poke() }
func (l Link) Wait()                   { l.dev.Wait() }

// Interface guards.
var (
	_ fleet.Operations = Ops{}
	_ mqtt.Attachment  = Link{}
)
