package host

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// The scrub: an agent process reads its store's files back from the disk
// now and then (plugin.Scrubber), so that bit rot on an SD card is found,
// logged and counted (/metrics, status, telemetry) while the agent runs,
// before a restart needs the data, and rewritten from a good copy where
// the store holds one. It runs only when the agent has not saved for
// scrubIdle (the read holds the store's lock of the agent), at most once
// per interval (config scrub_interval), the first one an interval after
// the start.

// scrubIdle is how long the agent must not have saved before a scrub.
const scrubIdle = 30 * time.Second

// scrubber runs the scrub of one agent.
type scrubber struct {
	store    plugin.Scrubber
	agentID  string
	interval time.Duration
	idle     time.Duration
	lastSave atomic.Int64 // unix nanoseconds of the last save's end
	now      func() time.Time
	report   func(plugin.ScrubReport, error)
	log      zerolog.Logger
}

// afterSave records the end of a save; wrap returns next with it.
func (s *scrubber) wrap(next func(*agent.Snapshot)) func(*agent.Snapshot) {
	return func(snap *agent.Snapshot) {
		s.lastSave.Store(s.now().UnixNano())
		if next != nil {
			next(snap)
		}
	}
}

// run scrubs until ctx ends, looking at every tick whether one is due.
func (s *scrubber) run(ctx context.Context, tick <-chan time.Time) {
	last := s.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if now := s.now(); s.due(now, last) {
			last = now
			s.once(ctx)
		}
	}
}

// due reports whether a scrub is due at now, the last one (or the start)
// having been at last: an interval has passed, and idle since the last
// save.
func (s *scrubber) due(now, last time.Time) bool {
	return now.Sub(last) >= s.interval && now.Sub(time.Unix(0, s.lastSave.Load())) >= s.idle
}

// once runs one scrub and reports it.
func (s *scrubber) once(ctx context.Context) {
	start := s.now()
	rep, err := s.store.Scrub(ctx, s.agentID)
	took := s.now().Sub(start)
	switch {
	case err != nil:
		s.log.Error().Str("agent", s.agentID).Err(err).Msg("scrub: the store could not be checked")
	case len(rep.Damage) == 0:
		s.log.Info().Str("agent", s.agentID).Int64("bytes", rep.Bytes).Dur("took", took).
			Msg("scrub: the store's files read back without damage")
	default:
		for _, d := range rep.Damage {
			s.log.Error().Str("agent", s.agentID).Str("damage", d).
				Msg("scrub: the store is damaged on the disk")
		}
		for _, r := range rep.Repaired {
			s.log.Warn().Str("agent", s.agentID).Str("repaired", r).
				Msg("scrub: a damaged part was rewritten from a good copy")
		}
	}
	if s.report != nil {
		s.report(rep, err)
	}
}

// startScrub starts the scrub of st for agentID if st can scrub and
// interval is positive; the returned stop ends it and waits for it.
func startScrub(st any, agentID string, interval time.Duration, report func(plugin.ScrubReport, error), log zerolog.Logger) (*scrubber, func()) {
	sc, ok := st.(plugin.Scrubber)
	if !ok || interval <= 0 {
		return nil, func() {}
	}
	s := &scrubber{store: sc, agentID: agentID, interval: interval, idle: min(scrubIdle, interval),
		now: time.Now, report: report, log: log}
	s.lastSave.Store(s.now().UnixNano())
	ctx, cancel := context.WithCancel(context.Background())
	tick := time.NewTicker(min(s.interval, s.idle, 10*time.Second))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.run(ctx, tick.C) }()
	return s, func() { cancel(); wg.Wait(); tick.Stop() }
}
