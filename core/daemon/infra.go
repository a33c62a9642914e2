package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// infraSet is the infrastructure plugins the command line hands in
// (Options.Infra): started in order in boot phase 1, before any agent, and
// closed in reverse when the daemon stops. It owns which of them started;
// /healthz and /metrics read it (up), and each agent's command line gets
// their AgentArgs (spec.go).
type infraSet struct {
	list []Infrastructure // read-only
	log  zerolog.Logger
	now  func() time.Time

	mu sync.Mutex // guards up
	up []bool     // up[i]: list[i] started
}

// start starts the plugins in order; each one started registers its Close
// with closeLater. The first failure ends the boot.
func (s *infraSet) start(ctx context.Context, closeLater func(func())) error {
	s.mu.Lock()
	s.up = make([]bool, len(s.list))
	s.mu.Unlock()
	for i, inf := range s.list {
		ts := s.now()
		if err := inf.Start(ctx); err != nil {
			_ = inf.Close() // whatever it started before failing
			return fmt.Errorf("infrastructure %s: %w", inf.Name(), err)
		}
		s.mu.Lock()
		s.up[i] = true
		s.mu.Unlock()
		closeLater(func() {
			if err := inf.Close(); err != nil {
				s.log.Warn().Err(err).Str("infra", inf.Name()).Msg("closing infrastructure")
			}
		})
		s.log.Info().Str("infra", inf.Name()).Int64("duration_ms", s.now().Sub(ts).Milliseconds()).Msgf("infrastructure %s ready", inf.Name())
	}
	return nil
}

// started returns, per plugin of list, whether it started.
func (s *infraSet) started() []bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]bool(nil), s.up...)
}
