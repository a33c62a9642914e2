package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"path/filepath"
	"time"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/logx"
	"github.com/openstarry/openstarry-edge/transport/fleet"
)

// fleetOps carries out the hub's signed commands through the daemon's own
// control API, with the operator's token, as `openstarry status` and
// `openstarry agent` do on the device.
type fleetOps struct {
	cfg  *config.Config
	ring *logx.Ring
	upd  *daemonUpdater
}

// Update installs a signed binary (the hub's update command).
func (o fleetOps) Update(ctx context.Context, url, commandID string, rollback bool) (any, error) {
	return o.upd.Update(ctx, url, commandID, rollback)
}

// AfterUpdate restarts the daemon into the installed update.
func (o fleetOps) AfterUpdate() { o.upd.AfterUpdate() }

func (o fleetOps) client() (*control.Client, error) { return control.Discover(o.cfg.Data) }

func (o fleetOps) Status(ctx context.Context) (any, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Status(ctx)
}

func (o fleetOps) Restart(ctx context.Context, id string) (any, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Restart(ctx, id)
}

// Start starts a stopped agent: for the daemon that is a restart.
func (o fleetOps) Start(ctx context.Context, id string) (any, error) { return o.Restart(ctx, id) }

func (o fleetOps) Stop(ctx context.Context, id string) (any, error) {
	c, err := o.client()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Stop(ctx, id)
}

func (o fleetOps) LogsTail(n int) []string { return o.ring.Tail(n) }

func (o fleetOps) Config() any { return o.cfg.Effective() }

// trustedFleetKeys parses design.trusted_keys: the keys whose signature the
// device obeys, for templates and for commands alike.
func trustedFleetKeys(cfg *config.Config) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for _, s := range cfg.Design.TrustedKeys {
		k, err := design.ParseTrustedKey(s)
		if err != nil {
			return nil, fmt.Errorf("design.trusted_keys: %w", err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// telemetry gathers the device's figures for its retained telemetry.
func (o fleetOps) telemetry(device string, started time.Time, counters func() map[string]int64) func(ctx context.Context) fleet.Telemetry {
	return func(ctx context.Context) fleet.Telemetry {
		now := time.Now()
		t := fleet.Telemetry{Device: device, Version: version, Time: now.UTC(), Started: started.UTC(),
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

func fleetNoncesPath(cfg *config.Config) string { return filepath.Join(cfg.Data, "fleet-nonces.json") }
