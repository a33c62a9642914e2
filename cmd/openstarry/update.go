package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/update"
	"github.com/openstarry/openstarry-edge/transport/fleet"
)

// updateRole is how this process was started: update.RoleTrial when a
// guard runs it as a new version on trial (set by updateBoot).
var updateRole string

// newUpdateManager is the update manager of cfg's data directory, trusting
// the fleet keys of design.trusted_keys.
func newUpdateManager(cfg *config.Config, log zerolog.Logger) (*update.Manager, error) {
	keys, err := trustedFleetKeys(cfg)
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("update: the running binary: %w", err)
	}
	return &update.Manager{Paths: update.PathsFor(cfg.Data), Self: selfInfo(), Exe: exe, Trusted: keys,
		Log: log.With().Str("component", "update").Logger()}, nil
}

// daemonUpdater is the running daemon's side of a self-update: it installs
// an update (the hub's update command, or one `openstarry update` staged),
// stops the daemon and restarts it into the update's guard, and reports
// the outcome of the last update to the hub once connected.
type daemonUpdater struct {
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

func newDaemonUpdater(ctx context.Context, cfg *config.Config, log zerolog.Logger) (*daemonUpdater, context.Context, error) {
	m, err := newUpdateManager(cfg, log)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	return &daemonUpdater{m: m, log: m.Log, trial: updateRole == update.RoleTrial, ctx: ctx, cancel: cancel}, ctx, nil
}

// Update installs the binary at from for the hub's command id; an older
// version only when rollback.
func (u *daemonUpdater) Update(ctx context.Context, from, commandID string, rollback bool) (any, error) {
	if err := selfUpdateSupported(); err != nil {
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

func (u *daemonUpdater) install(j *update.Journal) error {
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

// AfterUpdate stops the daemon; runDaemonTo then restarts it (restart).
func (u *daemonUpdater) AfterUpdate() {
	u.mu.Lock()
	pending := u.pending
	u.mu.Unlock()
	if pending {
		u.log.Info().Msg("update: stopping the daemon to restart it into the update")
		u.cancel()
	}
}

// applyStaged installs what `openstarry update` staged, and restarts.
func (u *daemonUpdater) applyStaged() {
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

func (u *daemonUpdater) restartPending() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.pending
}

// Attach reports the outcome of the last update on the hub, once; on
// trial, as soon as the guard commits it. Call it on every connect.
func (u *daemonUpdater) Attach(c paho.Client, prefix, device string) {
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

func (u *daemonUpdater) report(c paho.Client, prefix, device string) {
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
			Running: version, Boots: j.Boots, Reason: j.Reason, Time: time.Now().UTC()}
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

func newUpdateCmd(g *globals) *cobra.Command {
	var f configFlags
	var from string
	var wait time.Duration
	var rollback bool
	cmd := &cobra.Command{
		Use:   "update --from FILE|URL [--config FILE] [--data DIR]",
		Short: "Install a signed openstarry binary; the daemon runs it on trial and rolls back by itself",
		Long: `Install a new openstarry binary on this device. --from is the binary's file or
http(s):// URL; SHA256SUMS and SHA256SUMS.sig must be beside it (what make
release and openstarry sign-release write), signed by one of
design.trusted_keys, and must list the binary's sha256. It must be built for
this platform, and the snapshot schema it declares (version --json) must be
one this version loads, so that a rollback loses nothing.

The binary is written to DATA/bin/openstarry.new, fsynced, and renamed over
DATA/bin/openstarry (the running binary is kept as DATA/bin/openstarry.prev).
When a daemon runs on the data directory, it restarts into the new version
on trial and this command waits for the outcome: committed once the master
is online and /healthz answers within update.trial_timeout, rolled back
after update.max_boots starts without that. Otherwise the next start runs it
on trial.

A version older than the one the daemon runs (or, with no daemon, the one
installed in DATA/bin) is refused unless --rollback says it is wanted.

Exit status: 0 when installed (and committed, with a running daemon), 1
when refused or rolled back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return errors.New("--from is required: the binary's file or URL")
			}
			if err := selfUpdateSupported(); err != nil {
				return err
			}
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			return runUpdate(cmd, cfg, from, wait, rollback, g.logger())
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&from, "from", "", "the new binary: a file or an http(s):// URL, with SHA256SUMS and SHA256SUMS.sig beside it")
	cmd.Flags().BoolVar(&rollback, "rollback", false, "install it even if it is older than the running version")
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to wait for the outcome with a running daemon (default update.trial_timeout × update.max_boots + 1m)")
	return cmd
}

func runUpdate(cmd *cobra.Command, cfg *config.Config, from string, wait time.Duration, rollback bool, log zerolog.Logger) error {
	m, err := newUpdateManager(cfg, log)
	if err != nil {
		return err
	}
	if !strings.Contains(from, "://") {
		if abs, err := filepath.Abs(from); err == nil {
			from = abs
		}
	}
	ctx := cmd.Context()
	// The version the update replaces: the running daemon's, else the
	// binary installed in the slot (what the next start runs), else this
	// one's.
	pid, running := runningDaemon(ctx, cfg.Data)
	if pid != 0 {
		m.Running = running
	} else if _, err := os.Stat(m.Paths.Slot); err == nil {
		if info, err := update.Probe(ctx, m.Paths.Slot); err == nil {
			m.Running = info.Version
		}
	}
	j, err := m.Stage(ctx, from, "", rollback)
	if err != nil {
		return exitCode(exitFailure, err)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "verified %s: version %s, sha256 %s, signed by a trusted fleet key\n", from, j.To, j.ToSHA)
	if pid == 0 {
		if err := m.Apply(j); err != nil {
			return exitCode(exitFailure, err)
		}
		fmt.Fprintf(out, "installed %s as %s (%s kept as %s); no daemon runs on %s: the next start runs it on trial\n",
			j.To, m.Paths.Slot, j.From, m.Paths.Prev, cfg.Data)
		return nil
	}
	if err := m.Write(j); err != nil {
		return err
	}
	if err := signalApply(pid); err != nil {
		return fmt.Errorf("update: ask the daemon (pid %d) to install it: %w", pid, err)
	}
	fmt.Fprintf(out, "staged; the daemon (pid %d) installs it and restarts on trial\n", pid)
	if wait <= 0 {
		wait = cfg.Update.TrialTimeout*time.Duration(cfg.Update.MaxBoots) + time.Minute
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		cur, err := m.Journal()
		if err == nil && cur != nil && cur.Started.Equal(j.Started) && cur.Phase.Final() {
			fmt.Fprintf(out, "update %s → %s: %s", cur.From, cur.To, cur.Phase)
			if cur.Reason != "" {
				fmt.Fprintf(out, ": %s", cur.Reason)
			}
			fmt.Fprintln(out)
			if cur.Phase != update.PhaseCommitted {
				return exitCode(exitFailure, fmt.Errorf("update %s", cur.Phase))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return exitCode(exitFailure, fmt.Errorf("no outcome within %s; %s says where the update stands", wait, m.Paths.Journal))
}

// runningDaemon returns the pid and version of the daemon on data, 0 when
// none answers.
func runningDaemon(ctx context.Context, data string) (int, string) {
	c, err := control.Discover(data)
	if err != nil {
		return 0, ""
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return 0, ""
	}
	return st.PID, st.Version
}
