// Package updater is openstarry's self-update outside the update
// protocol itself (core/update): the running daemon's side (Daemon: it
// installs what the hub's update command or `openstarry update` brings,
// restarts into it on trial and reports the outcome to the hub), the boot
// hook of `openstarry start` (Boot: the guard that runs a new version on
// trial), and the work of the `openstarry update` command (Install).
package updater

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/update"
	"github.com/openstarry/openstarry-edge/transport/fleet"
)

// TrustedKeys parses design.trusted_keys: the keys whose signature the
// device obeys, for templates, commands and updates alike.
func TrustedKeys(cfg *config.Config) ([]ed25519.PublicKey, error) {
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

// NewManager is the update manager of cfg's data directory, trusting
// the fleet keys of design.trusted_keys; self is the running binary as
// `version --json` describes it.
func NewManager(cfg *config.Config, self update.Info, log zerolog.Logger) (*update.Manager, error) {
	keys, err := TrustedKeys(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("update: the running binary: %w", err)
	}
	return &update.Manager{Paths: update.PathsFor(cfg.Data), Self: self, Exe: exe, Trusted: keys,
		Log: log.With().Str("component", "update").Logger()}, nil
}

// Daemon is the running daemon's side of a self-update: it installs
// an update (the hub's update command, or one `openstarry update` staged),
// stops the daemon and restarts it into the update's guard, and reports
// the outcome of the last update to the hub once connected.
type Daemon struct {
	m      *update.Manager
	log    zerolog.Logger
	trial  bool // this daemon is a new version on trial
	ctx    context.Context
	cancel context.CancelFunc // stops the daemon for the restart

	mu        sync.Mutex // guards the fields below and this process's journal writes
	busy      bool       // an update is being installed
	pending   bool       // one is installed: restart into it
	reporting bool
}

// NewDaemon returns the updater of the daemon that runs with cfg, and
// the context the daemon runs in: the updater cancels it to restart into
// an installed update. trial says this daemon is a new version on trial
// (Boot's answer).
func NewDaemon(ctx context.Context, cfg *config.Config, self update.Info, trial bool, log zerolog.Logger) (*Daemon, context.Context, error) {
	m, err := NewManager(cfg, self, log)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &Daemon{m: m, log: m.Log, trial: trial, ctx: ctx, cancel: cancel}, ctx, nil
}

// Update installs the binary at from for the hub's command id; an older
// version only when rollback.
func (u *Daemon) Update(ctx context.Context, from, commandID string, rollback bool) (any, error) {
	if err := Supported(); err != nil {
		return nil, err
	}
	u.mu.Lock()
	if u.busy || u.pending {
		u.mu.Unlock()
		return nil, fmt.Errorf("%w on this device", update.ErrBusy)
	}
	u.busy = true
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.busy = false
		u.mu.Unlock()
	}()
	u.log.Info().Str("from", from).Str("command", commandID).Msg("update: fetching and verifying")
	j, err := u.m.Stage(ctx, from, commandID, rollback)
	if err != nil {
		u.log.Error().Err(err).Str("from", from).Msg("update: refused")
		return nil, err
	}
	if err := u.install(j); err != nil {
		return nil, err
	}
	return map[string]string{"state": "installed", "from": j.From, "to": j.To, "sha256": j.ToSHA,
		"next": "the daemon restarts into it on trial; the outcome follows on this topic and on " + "{prefix}/{device}/update"}, nil
}

func (u *Daemon) install(j *update.Journal) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if err := u.m.Apply(j); err != nil {
		u.log.Error().Err(err).Msg("update: install failed; nothing changed")
		if j.Phase != update.PhaseAborted {
			j.Phase, j.Reason = update.PhaseAborted, err.Error()
			_ = u.m.Write(j)
		}
		os.Remove(u.m.Paths.New)
		return err
	}
	u.pending = true
	return nil
}

// AfterUpdate stops the daemon; its runner then restarts it (Restart).
func (u *Daemon) AfterUpdate() {
	u.mu.Lock()
	pending := u.pending
	u.mu.Unlock()
	if pending {
		u.log.Info().Msg("update: stopping the daemon to restart it into the update")
		u.cancel()
	}
}

// applyStaged installs what `openstarry update` staged, and restarts.
func (u *Daemon) applyStaged() {
	j, err := u.m.Journal()
	if err != nil || j == nil || j.Phase != update.PhaseStaged {
		u.log.Warn().Err(err).Msg("update: asked to apply a staged update, but none is staged")
		return
	}
	u.mu.Lock()
	busy := u.busy || u.pending
	u.mu.Unlock()
	if busy {
		u.log.Warn().Msg("update: another update is being installed; the staged one waits")
		return
	}
	if err := u.install(j); err != nil {
		return
	}
	u.AfterUpdate()
}

// RestartPending reports whether an update is installed: once the daemon
// stopped, Restart runs it.
func (u *Daemon) RestartPending() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.pending
}

// Attach reports the outcome of the last update on the hub, once; on
// trial, as soon as the guard commits it. Call it on every connect.
func (u *Daemon) Attach(c paho.Client, prefix, device string) {
	u.mu.Lock()
	if u.reporting {
		u.mu.Unlock()
		return
	}
	u.reporting = true
	u.mu.Unlock()
	go func() {
		defer func() {
			u.mu.Lock()
			u.reporting = false
			u.mu.Unlock()
		}()
		u.report(c, prefix, device)
	}()
}

func (u *Daemon) report(c paho.Client, prefix, device string) {
	for {
		j, err := u.m.Journal()
		if err != nil || j == nil || j.Phase == update.PhaseStaged || (j.Phase.Final() && j.Reported) {
			return
		}
		if j.Phase == update.PhaseTrial {
			if !u.trial {
				return
			}
			select {
			case <-u.ctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		o := fleet.Outcome{ID: j.CommandID, Device: device, State: string(j.Phase), From: j.From, To: j.To,
			Running: u.m.Self.Version, Boots: j.Boots, Reason: j.Reason, Time: time.Now().UTC()}
		ev := u.log.Info()
		if j.Phase != update.PhaseCommitted {
			ev = u.log.Error()
		}
		ev.Str("state", o.State).Str("from", o.From).Str("to", o.To).Str("reason", o.Reason).Msg("update: outcome reported to the hub")
		b, _ := json.Marshal(o)
		toks := []paho.Token{c.Publish(fleet.UpdateTopic(prefix, device), 1, true, b)}
		if j.CommandID != "" {
			rb, _ := json.Marshal(fleet.OutcomeReply(o))
			toks = append(toks, c.Publish(fleet.ReplyTopic(prefix, device, "update"), 1, false, rb))
		}
		for _, t := range toks {
			if !t.WaitTimeout(10*time.Second) || t.Error() != nil {
				return // the next connect tries again
			}
		}
		u.mu.Lock()
		defer u.mu.Unlock()
		if cur, err := u.m.Journal(); err == nil && cur != nil && cur.Phase == j.Phase && cur.Started.Equal(j.Started) {
			cur.Reported = true
			if err := u.m.Write(cur); err != nil {
				u.log.Warn().Err(err).Msg("update: record that the outcome was reported")
			}
		}
		return
	}
}
