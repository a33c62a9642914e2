package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Ephemeral workers (seed 002 §4: state "deletable upon task completion").
//
// A worker whose template sets "ephemeral" is retired once the result of its
// last handoff is durable at its requester: the registry records that it is
// retiring, its process is stopped, its snapshot is deleted from the store,
// and it leaves the registry. Each step is idempotent and the registry's mark
// comes first, so a daemon that crashes in between finishes the retirement
// at its next boot instead of restoring the worker. A worker that still has
// queued tasks or undelivered results when it stops is started again and
// kept. A master is never ephemeral (validation refuses it), and nothing of
// a master is deleted.

// retireIfDone retires worker when it is ephemeral and has no handoff left.
func (w *workers) retireIfDone(ctx context.Context, worker string) {
	w.retireMu.Lock()
	defer w.retireMu.Unlock()
	m := w.super.member(worker)
	if m == nil || !m.getSpec().Ephemeral {
		return
	}
	reg := w.reg.snapshot()
	if slices.ContainsFunc(reg.Handoffs, func(h handoff) bool { return h.Worker == worker }) {
		return
	}
	log := w.log.With().Str("agent", worker).Logger()
	if err := w.reg.setRetiring(worker); err != nil {
		log.Error().Err(err).Msg("ephemeral worker not retired: recording it")
		return
	}
	if err := w.super.remove(ctx, m); err != nil {
		log.Error().Err(err).Msg("ephemeral worker not retired: stopping it")
		return
	}
	kept, err := w.deleteSnapshot(ctx, worker, m.getSpec().Storage)
	switch {
	case err != nil:
		log.Error().Err(err).Msg("ephemeral worker stopped but its snapshot could not be deleted; the next boot tries again")
		return
	case kept != "":
		log.Warn().Msgf("ephemeral worker %s not retired: %s; starting it again", worker, kept)
		if err := w.reg.clearRetiring(worker); err != nil {
			log.Error().Err(err).Msg("recording the worker")
		}
		if _, err := w.super.add(worker, m.role, m.getSpec()); err != nil {
			log.Error().Err(err).Msg("ephemeral worker not started again")
		}
		return
	}
	if err := w.reg.removeWorker(worker); err != nil {
		log.Error().Err(err).Msg("forgetting the retired worker")
		return
	}
	log.Info().Msgf("ephemeral worker %s retired: its last result reached %s; its snapshot is deleted", worker, m.getSpec().Requester)
}

// deleteSnapshot deletes an ephemeral worker's snapshot, unless it still
// holds work (queued events, results not yet confirmed delivered): then it
// says why in kept and deletes nothing.
func (w *workers) deleteSnapshot(ctx context.Context, id, storeURL string) (kept string, err error) {
	if storeURL == "" {
		storeURL = w.cfg.Store
	}
	if storeURL == "" {
		storeURL = "bbolt://"
	}
	st, err := plugin.OpenStorage(ctx, storeURL, plugin.Env{DataDir: w.data, Log: w.log})
	if err != nil {
		return "", fmt.Errorf("state store: %w", err)
	}
	defer st.Close()
	snap, err := st.Load(ctx, id)
	switch {
	case errors.Is(err, plugin.ErrCorrupt):
		// Nothing in it can be used again; deleting is what retiring means.
	case err != nil:
		return "", err
	case snap != nil && len(snap.EventQueueBackup) > 0:
		return fmt.Sprintf("%d queued events", len(snap.EventQueueBackup)), nil
	case snap != nil && len(snap.Outbox) > 0:
		return fmt.Sprintf("%d results not yet delivered", len(snap.Outbox)), nil
	}
	return "", st.Delete(ctx, id)
}

// finishRetirements completes the retirements a previous run recorded but
// did not finish; it returns the ids it retired.
func (w *workers) finishRetirements(ctx context.Context) []string {
	var done []string
	for _, rw := range w.reg.snapshot().Workers {
		if !rw.Retiring {
			continue
		}
		if _, err := w.deleteSnapshot(ctx, rw.ID, rw.Storage); err != nil {
			w.log.Error().Str("agent", rw.ID).Err(err).Msg("retiring an ephemeral worker: its snapshot could not be deleted")
			continue
		}
		if err := w.reg.removeWorker(rw.ID); err != nil {
			w.log.Error().Str("agent", rw.ID).Err(err).Msg("forgetting the retired worker")
			continue
		}
		w.log.Info().Str("agent", rw.ID).Msgf("ephemeral worker %s retired (the previous run stopped before it finished)", rw.ID)
		done = append(done, rw.ID)
	}
	return done
}
