//go:build unix

package updater

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/update"
)

// Supported says whether this platform updates itself: nil, it does.
func Supported() error { return nil }

// Boot runs first in `start`: it settles an interrupted update, runs a new
// version on trial under the guard, or execs the version the last update
// kept (DATA/bin/openstarry). handled means the daemon must not boot in
// this process: the guard ran it, and err is how it ended. trial means this
// process is a new version on trial, started by its guard: its daemon
// reports the outcome once the guard commits it (NewDaemon).
func Boot(cfg *config.Config, self update.Info, log zerolog.Logger) (handled, trial bool, err error) {
	role := os.Getenv(update.EnvRole)
	os.Unsetenv(update.EnvRole)
	if role == update.RoleTrial {
		return false, true, nil
	}
	m, err := NewManager(cfg, self, log)
	if err != nil {
		log.Error().Err(err).Msg("update: not checking for an installed update")
		return false, false, nil
	}
	act, _ := m.Boot()
	switch act {
	case update.Hop:
		m.Log.Info().Str("binary", m.Paths.Slot).Msg("update: running the version the last update kept")
		err := execBinary(m.Paths.Slot)
		m.Log.Error().Err(err).Str("binary", m.Paths.Slot).Msg("update: cannot run the kept version; booting this binary")
		return false, false, nil
	case update.Guard:
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
		signal.Ignore(syscall.SIGUSR1)
		res, err := m.Guard(update.GuardOptions{Args: os.Args[1:], Env: os.Environ(), MaxBoots: cfg.Update.MaxBoots,
			TrialTimeout: cfg.Update.TrialTimeout, StopTimeout: cfg.Supervise.StopTimeout + 20*time.Second,
			Healthy: update.DaemonHealthy(cfg.Data), Signals: sigs, Stdout: os.Stdout, Stderr: os.Stderr})
		signal.Stop(sigs)
		if err != nil {
			return true, false, err
		}
		if res.Exec != "" {
			return true, false, fmt.Errorf("update: run %s: %w", res.Exec, execBinary(res.Exec))
		}
		if res.Code != 0 {
			return true, false, exitcode.New(res.Code, fmt.Errorf("the daemon exited with status %d", res.Code))
		}
		return true, false, nil
	}
	return false, false, nil
}

// execBinary replaces this process with path, same arguments; it returns
// only on failure.
func execBinary(path string) error {
	return syscall.Exec(path, append([]string{path}, os.Args[1:]...), os.Environ())
}

// Restart runs the installed update once the daemon has stopped: a daemon
// on trial asks its guard (exit ExitRestart); any other execs the previous
// binary (this version, kept as DATA/bin/openstarry.prev), whose boot runs
// the update on trial under its guard.
func (u *Daemon) Restart() error {
	if u.trial {
		return exitcode.New(update.ExitRestart, errors.New("restarting into the installed update (the guard starts it)"))
	}
	u.log.Info().Str("guard", u.m.Paths.Prev).Msg("update: restarting")
	return fmt.Errorf("update: restart: %w", execBinary(u.m.Paths.Prev))
}

// WatchStaged installs what `openstarry update` staged when it sends
// SIGUSR1, until ctx ends.
func (u *Daemon) WatchStaged(ctx context.Context) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(ch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				u.applyStaged()
			}
		}
	}()
}

func signalApply(pid int) error { return syscall.Kill(pid, syscall.SIGUSR1) }
