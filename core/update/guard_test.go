//go:build unix

package update

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// guardSetup puts script in the slot on trial, with "previous" as .prev.
func guardSetup(t *testing.T, script string) *Manager {
	t.Helper()
	data := t.TempDir()
	p := PathsFor(data)
	os.MkdirAll(p.Dir, 0o700)
	if err := os.WriteFile(p.Slot, []byte("#!/bin/sh\n"+script+"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p.Prev, []byte("#!/bin/sh\necho previous\n"), 0o700)
	m := &Manager{Paths: p, Log: zerolog.New(zerolog.NewTestWriter(t))}
	if err := m.Write(&Journal{Phase: PhaseTrial, From: "1", To: "2"}); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestGuard(t *testing.T) {
	never := func(context.Context, int, string) error { return errors.New("not yet") }
	t.Run("crash loop rolls back", func(t *testing.T) {
		m := guardSetup(t, "exit 3")
		res, err := m.Guard(GuardOptions{MaxBoots: 2, TrialTimeout: time.Minute, StopTimeout: time.Second, Healthy: never, Interval: 20 * time.Millisecond})
		if err != nil || res.Exec != m.Paths.Slot {
			t.Fatalf("Guard = %+v, %v", res, err)
		}
		j, _ := m.Journal()
		if j.Phase != PhaseRolledBack || j.Boots != 3 {
			t.Fatalf("journal %+v", j)
		}
		if b, _ := os.ReadFile(m.Paths.Slot); string(b) != "#!/bin/sh\necho previous\n" {
			t.Fatalf("slot after rollback: %q", b)
		}
	})
	t.Run("not healthy in time rolls back", func(t *testing.T) {
		m := guardSetup(t, "exec sleep 30")
		res, err := m.Guard(GuardOptions{MaxBoots: 3, TrialTimeout: 300 * time.Millisecond, StopTimeout: time.Second, Healthy: never, Interval: 20 * time.Millisecond})
		if err != nil || res.Exec != m.Paths.Slot {
			t.Fatalf("Guard = %+v, %v", res, err)
		}
		if j, _ := m.Journal(); j.Phase != PhaseRolledBack || j.Boots != 1 {
			t.Fatalf("journal %+v", j)
		}
	})
	t.Run("healthy commits, then forwards signals", func(t *testing.T) {
		// The child is healthy once its trap is set: a SIGTERM forwarded
		// before that would kill the shell instead of ending it with 0.
		ready := filepath.Join(t.TempDir(), "ready")
		m := guardSetup(t, "trap 'exit 0' INT TERM; : >'"+ready+"'; while :; do sleep 0.05; done")
		sigs := make(chan os.Signal, 1)
		committed := make(chan struct{})
		go func() {
			for {
				if j, _ := m.Journal(); j != nil && j.Phase == PhaseCommitted {
					close(committed)
					sigs <- syscall.SIGTERM
					return
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
		res, err := m.Guard(GuardOptions{MaxBoots: 3, TrialTimeout: time.Minute, StopTimeout: time.Second, Signals: sigs, Interval: 20 * time.Millisecond,
			Healthy: func(_ context.Context, pid int, v string) error {
				if pid <= 0 || v != "2" {
					return errors.New("wrong")
				}
				if _, err := os.Stat(ready); err != nil {
					return err
				}
				return nil
			}})
		<-committed
		if err != nil || res.Exec != "" || res.Code != 0 {
			t.Fatalf("Guard = %+v, %v", res, err)
		}
		if b, _ := os.ReadFile(m.Paths.Slot); filepath.Base(m.Paths.Slot) == "" || string(b) == "#!/bin/sh\necho previous\n" {
			t.Fatal("a committed update was rolled back")
		}
	})
	t.Run("restart request after the commit execs the previous binary", func(t *testing.T) {
		// The child asks for the restart only once the update is
		// committed: an exit before the first health check is a crash.
		goAhead := filepath.Join(t.TempDir(), "committed")
		m := guardSetup(t, "while [ ! -e '"+goAhead+"' ]; do sleep 0.01; done; exit 75")
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				if j, _ := m.Journal(); j != nil && j.Phase == PhaseCommitted {
					os.WriteFile(goAhead, nil, 0o600)
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		res, err := m.Guard(GuardOptions{MaxBoots: 3, TrialTimeout: time.Minute, StopTimeout: time.Second, Interval: 20 * time.Millisecond,
			Healthy: func(context.Context, int, string) error { return nil }})
		if err != nil || res.Exec != m.Paths.Prev {
			t.Fatalf("Guard = %+v, %v", res, err)
		}
	})
}
