package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// run is the boot of seed 004, one method per phase, then the life of the
// daemon until ctx ends. What a phase opens it registers in d.closers,
// which run in reverse order when run returns, whatever the phase reached.
func (d *Daemon) run(ctx context.Context) error {
	d.boot.started = d.now()
	defer d.cancelLife()
	go d.super.deliverEvents(d.life)
	defer func() {
		for i := len(d.closers) - 1; i >= 0; i-- {
			d.closers[i]()
		}
	}()

	if err := d.bootInfrastructure(ctx); err != nil {
		return err
	}
	master, err := d.bootDesignLayer(ctx)
	if err != nil {
		return err
	}
	if ok, err := d.bootMaster(ctx, master); err != nil {
		return err
	} else if !ok {
		d.shutdown()
		return nil // ctx ended during the boot
	}
	d.bootWorkers(ctx)

	<-ctx.Done()
	d.log.Info().Msg("stopping: agents in reverse order of their start")
	d.shutdown()
	return nil
}

// closeLater registers f to run when run returns (the last registered
// first).
func (d *Daemon) closeLater(f func()) { d.closers = append(d.closers, f) }

// bootInfrastructure is phase 1: the daemon lock, the registry of workers,
// sessions.db, the control API and its token, the HTTP listener, the
// infrastructure plugins, and the scan of the state store for agents the
// previous run left interrupted.
func (d *Daemon) bootInfrastructure(ctx context.Context) error {
	t1 := d.now()
	if err := privfs.MkdirAll(d.runDir); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	lock, err := lockDir(d.runDir)
	if err != nil {
		return err
	}
	d.closeLater(lock.release)
	if d.workers.reg, err = openRegistry(d.runDir); err != nil {
		return err
	}
	// The state database before anything can use it: sessions.db opened
	// and migrated, sessions the previous run left open marked interrupted.
	if err := d.openSessions(ctx); err != nil {
		return err
	}
	// Every return from here is an orderly stop (a kill -9 runs nothing):
	// open sessions end as shutdown, and the journal records the clean stop.
	d.closeLater(func() { d.closeSessions(true) })
	if err := d.ctl.serve(d.closeLater); err != nil {
		return err
	}
	if err := d.httpd.serve(d.closeLater); err != nil {
		return err
	}
	if err := d.infra.start(ctx, d.closeLater); err != nil {
		return err
	}
	store, interrupted, err := scanStore(ctx, d.cfg.Store, d.data, d.log)
	if store != nil {
		d.boot.setStore(store)
	}
	if err != nil {
		return err
	}
	d.boot.setInterrupted(interrupted)
	var recover []string
	for _, in := range interrupted {
		if in.Error == "" {
			recover = append(recover, in.AgentID)
		}
	}
	d.super.setRecover(recover)
	d.boot.phaseDone(1, "infrastructure", "phase 1/4 infrastructure ready", t1,
		d.log.Info().Str("control", d.ctl.addr).Int("interrupted", len(interrupted)))
	return nil
}

// bootDesignLayer is phase 2: the resolver's preflight and the master's
// template, resolved and frozen.
func (d *Daemon) bootDesignLayer(ctx context.Context) (agentSpec, error) {
	t2 := d.now()
	if err := d.specs.res.Preflight(ctx); err != nil {
		return agentSpec{}, fmt.Errorf("design layer: %w", err)
	}
	mspec, err := d.specs.resolveSpec(ctx, d.cfg.Master.Agent, d.cfg.Master.Template, "", "")
	if err != nil {
		return agentSpec{}, fmt.Errorf("design layer: master template: %w", err)
	}
	d.boot.phaseDone(2, "design layer", "phase 2/4 design layer ready", t2,
		d.log.Info().Str("template", mspec.Template).Str("source", mspec.Source).Str("digest", mspec.Digest))
	return mspec, nil
}

// bootMaster is phase 3: the master spawned and awaited until it runs, or
// settles in crashloop or stopped (the boot goes on, degraded). It returns
// false when ctx ended first.
func (d *Daemon) bootMaster(ctx context.Context, mspec agentSpec) (bool, error) {
	t3 := d.now()
	masterID := d.cfg.Master.Agent
	d.log.Info().Str("agent", masterID).Str("blueprint", mspec.Blueprint).Msg("spawning the master")
	m, err := d.super.add(masterID, control.RoleMaster, mspec)
	if err != nil {
		return false, err
	}
	online := d.super.waitSettled(ctx, m)
	if ctx.Err() != nil {
		return false, nil
	}
	var ev *zerolog.Event
	msg := "phase 3/4 master online"
	if online {
		ev = d.log.Info().Str("agent", masterID).Int("pid", m.info().PID).Str("addr", m.info().Addr)
	} else {
		info := m.info()
		msg = "phase 3/4 master NOT online"
		ev = d.log.Error().Str("agent", masterID).Str("state", info.State).Str("last_error", info.LastError)
	}
	d.boot.phaseDone(3, "master", msg, t3, ev)
	return true, nil
}

// bootWorkers is phase 4: the workers of the previous run restored, the
// pending handoffs resumed, and spawn requests accepted from now on.
func (d *Daemon) bootWorkers(ctx context.Context) {
	t4 := d.now()
	restored := d.workers.restore(ctx)
	d.boot.setBooted()
	d.startSessions(ctx)
	d.boot.phaseDone(4, "workers", "phase 4/4 workers on demand ready", t4, d.log.Info().Int("restored_workers", restored))
	d.log.Info().Int64("duration_ms", d.now().Sub(d.boot.started).Milliseconds()).Msg("boot complete")
	if n := BootNotice(d.data); n != "" {
		d.log.Warn().Str("notice", n).Msg("the first boot reported a problem (DATA/boot-notice; openstarry status shows it)")
	}
	if d.o.Booted != nil {
		d.o.Booted()
	}
}

// shutdown stops the session dispatchers (a task cut short by a clean
// stop is not a crash), then every agent, the last started first, then ends the
// handoffs (they resume at the next boot).
func (d *Daemon) shutdown() {
	d.pauseSessions()
	n := d.super.stopAll()
	d.cancelLife()
	d.handoffs.wait()
	d.log.Info().Int("agents", n).Msg("all agents stopped")
}

// bootState is what the daemon knows of this boot and of the run before
// it: when it started, the phases done, whether phase 4 is (spawns are
// accepted from then on), the state store and the interrupted agents
// phase 1 found, and how the previous run ended (the boot journal,
// journal.go).
type bootState struct {
	runDir string
	log    zerolog.Logger
	now    func() time.Time

	started time.Time // set by run before anything is served; read-only after

	mu          sync.Mutex // guards the fields below
	phases      []control.Phase
	booted      bool
	interrupted []control.Interruption
	store       *control.StoreState // the state store as phase 1 found it
	previousRun string              // none, clean, crash, power_loss
}

// phaseDone records boot phase n and logs msg with its duration on ev.
func (b *bootState) phaseDone(n int, name, msg string, start time.Time, ev *zerolog.Event) {
	dur := b.now().Sub(start)
	b.mu.Lock()
	b.phases = append(b.phases, control.Phase{N: n, Name: name, DurationMs: float64(dur.Microseconds()) / 1000, Done: true})
	b.mu.Unlock()
	ev.Int("phase", n).Float64("duration_ms", float64(dur.Microseconds())/1000).Msg(msg)
}

func (b *bootState) setBooted() {
	b.mu.Lock()
	b.booted = true
	b.mu.Unlock()
}

// isBooted reports whether phase 4 has begun accepting spawns.
func (b *bootState) isBooted() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.booted
}

func (b *bootState) setStore(s *control.StoreState) {
	b.mu.Lock()
	b.store = s
	b.mu.Unlock()
}

func (b *bootState) stateStore() *control.StoreState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.store
}

func (b *bootState) setInterrupted(in []control.Interruption) {
	b.mu.Lock()
	b.interrupted = in
	b.mu.Unlock()
}

// fill copies the boot's record into a status.
func (b *bootState) fill(st *control.Status) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st.Started = b.started
	st.Phases = append([]control.Phase(nil), b.phases...)
	st.Interrupted = append([]control.Interruption(nil), b.interrupted...)
	st.StateStore, st.PreviousRun = b.store, b.previousRun
}
