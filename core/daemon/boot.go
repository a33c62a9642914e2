package daemon

import (
	"context"
	"fmt"
	"net"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// run is the boot of seed 004, one method per phase, then the life of the
// daemon until ctx ends. What a phase opens it registers in d.closers,
// which run in reverse order when run returns, whatever the phase reached.
func (d *Daemon) run(ctx context.Context) error {
	d.started = d.now()
	d.life, d.cancelLife = context.WithCancel(context.Background())
	defer d.cancelLife()
	go d.deliverEvents()
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
	d.lock = lock
	d.closeLater(lock.release)
	if d.reg, err = openRegistry(d.runDir); err != nil {
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
	if err := d.serveControl(); err != nil {
		return err
	}
	if err := d.serveHTTP(); err != nil {
		return err
	}
	if err := d.startInfra(ctx); err != nil {
		return err
	}
	interrupted, err := d.scanInterruptions(ctx)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.interrupted = interrupted
	for _, in := range interrupted {
		if in.Error == "" {
			d.recover[in.AgentID] = true
		}
	}
	d.mu.Unlock()
	d.phaseDone(1, "infrastructure", "phase 1/4 infrastructure ready", t1,
		d.log.Info().Str("control", d.ctrlAddr).Int("interrupted", len(interrupted)))
	return nil
}

// serveControl makes the operator's token and serves the control API on
// its local socket (see package control).
func (d *Daemon) serveControl() error {
	var err error
	if d.token, err = control.NewToken(); err != nil {
		return err
	}
	ctrlLn, addr, err := control.Listen(d.runDir)
	if err != nil {
		return err
	}
	d.ctrlAddr = addr
	if err := control.WriteToken(d.runDir, d.token); err != nil {
		ctrlLn.Close()
		return fmt.Errorf("control token: %w", err)
	}
	d.closeLater(func() { control.RemoveFiles(d.runDir) })
	ctrlSrv := httpx.NewServer(d.controlHandler(), d.o.HTTPLimits)
	go func() { _ = ctrlSrv.Serve(httpx.Listen(ctrlLn, d.o.HTTPLimits, false, d.log)) }()
	d.closeLater(func() { shutdownServer(ctrlSrv) })
	return nil
}

// serveHTTP serves the HTTP listener (http.listen), when configured.
func (d *Daemon) serveHTTP() error {
	if d.cfg.HTTP.Listen == "" {
		return nil
	}
	ln, err := net.Listen("tcp", d.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http.listen %s: %w", d.cfg.HTTP.Listen, err)
	}
	d.httpAddr = "http://" + ln.Addr().String()
	h := d.httpHandler()
	if d.o.Web != nil {
		h = d.o.Web(h)
	}
	h = httpx.AllowHosts(d.cfg.HTTP.Hosts, h)
	srv := httpx.NewServer(h, d.o.HTTPLimits)
	go func() { _ = srv.Serve(httpx.Listen(ln, d.o.HTTPLimits, false, d.log)) }()
	d.closeLater(func() { shutdownServer(srv) })
	d.log.Info().Str("addr", d.httpAddr).Msgf("daemon listening on %s", d.httpAddr)
	return nil
}

// startInfra starts the infrastructure plugins in order.
func (d *Daemon) startInfra(ctx context.Context) error {
	d.infraUp = make([]bool, len(d.o.Infra))
	for i, inf := range d.o.Infra {
		ts := d.now()
		if err := inf.Start(ctx); err != nil {
			_ = inf.Close() // whatever it started before failing
			return fmt.Errorf("infrastructure %s: %w", inf.Name(), err)
		}
		d.mu.Lock()
		d.infraUp[i] = true
		d.mu.Unlock()
		d.closeLater(func() {
			if err := inf.Close(); err != nil {
				d.log.Warn().Err(err).Str("infra", inf.Name()).Msg("closing infrastructure")
			}
		})
		d.log.Info().Str("infra", inf.Name()).Int64("duration_ms", d.now().Sub(ts).Milliseconds()).Msgf("infrastructure %s ready", inf.Name())
	}
	return nil
}

// bootDesignLayer is phase 2: the resolver's preflight and the master's
// template, resolved and frozen.
func (d *Daemon) bootDesignLayer(ctx context.Context) (agentSpec, error) {
	t2 := d.now()
	if err := d.o.Resolver.Preflight(ctx); err != nil {
		return agentSpec{}, fmt.Errorf("design layer: %w", err)
	}
	mspec, err := d.resolveSpec(ctx, d.cfg.Master.Agent, d.cfg.Master.Template, "", "")
	if err != nil {
		return agentSpec{}, fmt.Errorf("design layer: master template: %w", err)
	}
	d.phaseDone(2, "design layer", "phase 2/4 design layer ready", t2,
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
	m, err := d.addMember(masterID, control.RoleMaster, mspec)
	if err != nil {
		return false, err
	}
	online := d.waitSettled(ctx, m)
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
	d.phaseDone(3, "master", msg, t3, ev)
	return true, nil
}

// bootWorkers is phase 4: the workers of the previous run restored, the
// pending handoffs resumed, and spawn requests accepted from now on.
func (d *Daemon) bootWorkers(ctx context.Context) {
	t4 := d.now()
	restored := d.restoreWorkers(ctx)
	d.mu.Lock()
	d.booted = true
	d.mu.Unlock()
	d.startSessions(ctx)
	d.phaseDone(4, "workers", "phase 4/4 workers on demand ready", t4, d.log.Info().Int("restored_workers", restored))
	d.log.Info().Int64("duration_ms", d.now().Sub(d.started).Milliseconds()).Msg("boot complete")
	if n := BootNotice(d.data); n != "" {
		d.log.Warn().Str("notice", n).Msg("the first boot reported a problem (DATA/boot-notice; openstarry status shows it)")
	}
	if d.o.Booted != nil {
		d.o.Booted()
	}
}
