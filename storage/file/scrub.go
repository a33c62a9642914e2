package file

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Scrub reads the agent's files back (plugin.Scrubber): both snapshot
// files, whose checksums must hold, and the task index with its copy, which
// every Save writes alike. When the two differ, both are rewritten with
// every line either holds intact (repairResults, as at start): the good
// copy. A damaged snapshot file is reported; the next Save replaces the
// current one.
func (s *Store) Scrub(ctx context.Context, agentID string) (plugin.ScrubReport, error) {
	var rep plugin.ScrubReport
	if err := agent.ValidateID(agentID); err != nil {
		return rep, fmt.Errorf("file: scrub: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	st, err := s.lock(agentID)
	if err != nil {
		return rep, fmt.Errorf("file: scrub %s: %w", agentID, err)
	}
	defer st.mu.Unlock()
	for _, ext := range []string{extCurrent, extPrev} {
		path := s.path(agentID, ext)
		_, info, err := s.read(path, agentID)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil && errors.As(err, new(*fs.PathError)):
			return rep, fmt.Errorf("file: scrub %s: %w", agentID, err)
		case err != nil:
			rep.Damage = append(rep.Damage, err.Error())
		default:
			rep.Bytes += info.Size()
		}
	}
	path, copyPath := s.path(agentID, extResults), s.path(agentID, extCopy)
	a, aErr := os.ReadFile(path)
	b, bErr := os.ReadFile(copyPath)
	for _, err := range []error{aErr, bErr} {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return rep, fmt.Errorf("file: scrub %s: %w", agentID, err)
		}
	}
	rep.Bytes += int64(len(a) + len(b))
	if !bytes.Equal(a, b) {
		where := fmt.Sprintf("%s and its copy %s differ", path, copyPath)
		rep.Damage = append(rep.Damage, where)
		if err := s.repairResults(agentID); err != nil {
			return rep, fmt.Errorf("file: scrub %s: task index: %w", agentID, err)
		}
		st.results = nil // scanned again by the next Save
		rep.Repaired = append(rep.Repaired, where+": both rewritten with every line either holds intact")
	}
	return rep, nil
}
