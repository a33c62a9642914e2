package daemon

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// scanStore opens the configured store (storeURL; "" is bbolt:// under
// data), says whether it is durable, lists its agents and loads
// each snapshot: one whose status is not STOPPED was not closed cleanly
// (a crash, a power cut, a kill -9). Each is logged and returned; the agents
// the daemon supervises are marked for recovery, and their hydration
// resolves the interrupted tick. The store is closed before returning: a
// bbolt file stays locked while a process has it open, and the agents must
// open theirs.
func scanStore(ctx context.Context, storeURL, data string, log zerolog.Logger) (*control.StoreState, []control.Interruption, error) {
	url := storeURL
	if url == "" {
		url = "bbolt://"
	}
	safe := url
	if u, err := neturl.Parse(url); err == nil && u.User != nil {
		// Only a password is hidden: Redacted would also turn "bbolt://"
		// into "bbolt:".
		safe = u.Redacted()
	}
	st, err := plugin.OpenStorage(ctx, url, plugin.Env{DataDir: data, Log: log})
	if err != nil {
		return nil, nil, fmt.Errorf("phase 1/4: the state store %s is not usable, so no agent can start: %w", safe, err)
	}
	ss := &control.StoreState{URL: safe, Durable: true}
	if dr, ok := st.(plugin.Durability); ok {
		if w := dr.Durability(); w != "" {
			ss.Durable, ss.Warning = false, w
		}
	}
	defer func() {
		if err := st.Close(); err != nil {
			log.Warn().Err(err).Msg("closing the state store after the scan")
		}
	}()
	lister, ok := st.(plugin.Lister)
	if !ok {
		log.Warn().Str("store", url).Msg("the state store cannot list its agents: no scan for abnormal interruptions")
		return ss, nil, nil
	}
	ids, err := lister.List(ctx)
	if err != nil {
		return ss, nil, fmt.Errorf("state store: list agents: %w", err)
	}
	var out []control.Interruption
	for _, id := range ids {
		snap, err := st.Load(ctx, id)
		switch {
		case errors.Is(err, plugin.ErrLocked):
			log.Warn().Str("agent", id).Err(err).Msg("agent is running outside the daemon (its store is locked)")
			out = append(out, control.Interruption{AgentID: id, Error: err.Error()})
		case err != nil:
			log.Error().Str("agent", id).Err(err).Msg("agent's snapshot cannot be read")
			out = append(out, control.Interruption{AgentID: id, Error: err.Error()})
		case snap == nil:
		case !snap.Status.Clean():
			log.Warn().Str("agent", id).Uint64("tick", snap.TickIndex).Str("status", string(snap.Status)).
				Int("queued", len(snap.EventQueueBackup)).
				Msgf("abnormal interruption: agent %s at tick %d status %s", id, snap.TickIndex, snap.Status)
			out = append(out, control.Interruption{AgentID: id, Tick: snap.TickIndex, Status: string(snap.Status)})
		}
	}
	return ss, out, nil
}
