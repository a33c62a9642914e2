package update

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"time"
)

// EnvRole tells a starting daemon what started it: RoleTrial, a guard.
const (
	EnvRole   = "OPENSTARRY_UPDATE_ROLE"
	RoleTrial = "trial"
)

// ExitRestart is the exit status with which a daemon running under a guard
// asks it to start the next update's guard (it installed one).
const ExitRestart = 75

// GuardOptions configure Guard.
type GuardOptions struct {
	Args         []string // the daemon's arguments, without the program name
	Env          []string // its environment, without EnvRole
	MaxBoots     int      // starts of the new binary allowed before a rollback
	TrialTimeout time.Duration
	StopTimeout  time.Duration // SIGTERM → SIGKILL of the child
	// Healthy returns nil once the daemon of pid runs version with its
	// master online and its health check passing.
	Healthy  func(ctx context.Context, pid int, version string) error
	Signals  <-chan os.Signal // forwarded to the child
	Stdout   io.Writer
	Stderr   io.Writer
	Interval time.Duration // health polls; default 250ms
}

// GuardResult says how the guard ended: exit with Code, or, when Exec is
// set, exec that binary with the daemon's arguments.
type GuardResult struct {
	Code int
	Exec string
}

// Guard runs the slot binary on trial as a child until it is healthy (the
// update is committed; the guard then waits for the child and forwards it
// signals), or it exits more than MaxBoots times or is not healthy within
// TrialTimeout (the update is rolled back; Exec names the previous binary,
// now in the slot). Each start is counted in the journal before it happens,
// so a guard that is killed counts too.
func (m *Manager) Guard(o GuardOptions) (GuardResult, error) {
	if o.Interval <= 0 {
		o.Interval = 250 * time.Millisecond
	}
	for {
		j, err := m.Journal()
		if err != nil {
			return GuardResult{Code: 1}, err
		}
		if j == nil || j.Phase != PhaseTrial {
			return GuardResult{Exec: m.Paths.Slot}, nil
		}
		j.Boots++
		if j.Boots > o.MaxBoots {
			reason := fmt.Sprintf("%s started %d times without becoming healthy (crash loop)", j.To, j.Boots-1)
			if err := m.Rollback(j, reason); err != nil {
				return GuardResult{Code: 1}, err
			}
			return GuardResult{Exec: m.Paths.Slot}, nil
		}
		if err := m.Write(j); err != nil {
			return GuardResult{Code: 1}, err
		}
		m.Log.Info().Str("version", j.To).Int("boot", j.Boots).Int("max_boots", o.MaxBoots).
			Dur("trial_timeout", o.TrialTimeout).Msg("update: starting the new version on trial")
		res, again, err := m.trial(j, o)
		if err != nil || !again {
			return res, err
		}
		// It exited before it was healthy: the next start is counted.
		select {
		case sig := <-o.Signals:
			m.Log.Info().Str("signal", sig.String()).Msg("update: stopping during the trial; it goes on at the next start")
			return GuardResult{Code: 0}, nil
		case <-time.After(time.Second):
		}
	}
}

// trial runs one start of the child. again reports that it exited before
// it was healthy and may be started again.
func (m *Manager) trial(j *Journal, o GuardOptions) (res GuardResult, again bool, err error) {
	cmd := exec.Command(m.Paths.Slot, o.Args...)
	cmd.Env = append(append([]string(nil), o.Env...), EnvRole+"="+RoleTrial)
	cmd.Stdout, cmd.Stderr = o.Stdout, o.Stderr
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		m.Log.Error().Err(err).Msg("update: the new version does not start")
		return GuardResult{}, true, nil
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	deadline := time.NewTimer(o.TrialTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	committed, stopping := false, false
	for {
		select {
		case werr := <-exited:
			code := exitCode(werr)
			switch {
			case committed && code == ExitRestart:
				return GuardResult{Exec: m.Paths.Prev}, false, nil
			case committed || stopping:
				return GuardResult{Code: code}, false, nil
			}
			m.Log.Error().Int("exit", code).Str("version", j.To).Msg("update: the new version exited on trial")
			return GuardResult{}, true, nil
		case sig := <-o.Signals:
			stopping = true
			_ = cmd.Process.Signal(sig)
		case <-tick.C:
			if committed || stopping {
				continue
			}
			hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
			herr := o.Healthy(hctx, cmd.Process.Pid, j.To)
			hcancel()
			if herr != nil {
				continue
			}
			j.Phase, j.Reason = PhaseCommitted, ""
			if err := m.Write(j); err != nil {
				m.Log.Error().Err(err).Msg("update: commit")
				continue
			}
			committed = true
			tick.Stop()
			m.Log.Info().Str("version", j.To).Int("boot", j.Boots).Msg("update: committed: the master is online and the health check passes")
		case <-deadline.C:
			if committed || stopping {
				continue
			}
			m.Log.Error().Str("version", j.To).Dur("trial_timeout", o.TrialTimeout).Msg("update: not healthy in time; stopping it")
			stopChild(cmd, exited, o.StopTimeout)
			reason := fmt.Sprintf("%s did not bring its master online and pass its health check within %s", j.To, o.TrialTimeout)
			if err := m.Rollback(j, reason); err != nil {
				return GuardResult{Code: 1}, false, err
			}
			return GuardResult{Exec: m.Paths.Slot}, false, nil
		}
	}
}

func stopChild(cmd *exec.Cmd, exited <-chan error, grace time.Duration) {
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-exited
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if c := ee.ExitCode(); c >= 0 {
			return c
		}
		return 128 + 9 // killed by a signal
	}
	if err != nil {
		return 1
	}
	return 0
}
