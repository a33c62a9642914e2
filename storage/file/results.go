package file

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
)

// resultsState is what the store knows of an agent's results file, from a
// scan when it first appends to it and its appends since.
type resultsState struct {
	lines       int   // lines in the file, valid or not
	oldest      int64 // smallest indexed_at of a valid line, Unix ms; 0 when none
	appended    int   // lines appended since the scan or the last compaction
	lastCompact int64 // Unix ms of the last compaction or scan
}

// resultLine is one line of ID.results.jsonl. Checksum is the CRC-32C of
// "{indexed_at}\n" followed by Result exactly as written.
type resultLine struct {
	Checksum  string          `json:"checksum"`
	IndexedAt int64           `json:"indexed_at"`
	Result    json.RawMessage `json:"result"`
}

func lineChecksum(indexedAt int64, result []byte) string {
	h := crc32.New(castagnoli)
	fmt.Fprintf(h, "%d\n", indexedAt)
	h.Write(result)
	return fmt.Sprintf("%s%08x", checksumPrefix, h.Sum32())
}

// encodeLine returns the line, newline included, that indexes r.
func encodeLine(r *agent.Result, indexedAt int64) ([]byte, error) {
	js, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(resultLine{Checksum: lineChecksum(indexedAt, js), IndexedAt: indexedAt, Result: js})
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// decodeLine parses one line (without its newline). A line that is JSON but
// fails its checksum returns the result it claims to hold along with an
// error wrapping errChecksum, so that TaskResult can tell a damaged answer
// from none.
func decodeLine(b []byte) (*agent.Result, int64, error) {
	var l resultLine
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, 0, err
	}
	var r agent.Result
	if err := json.Unmarshal(l.Result, &r); err != nil {
		return nil, 0, err
	}
	if l.Checksum != lineChecksum(l.IndexedAt, l.Result) {
		return &r, l.IndexedAt, errChecksum
	}
	return &r, l.IndexedAt, nil
}

// index appends the outbox results above the agent's mark to the results
// file, fsynced, compacts the file when it is due, and returns the new mark.
func (s *Store) index(ctx context.Context, st *agentState, snap *agent.Snapshot) (uint64, error) {
	id := snap.AgentID
	path := s.path(id, extResults)
	now := s.now().UnixMilli()
	if st.results == nil {
		rs, err := s.scan(path, now)
		if err != nil {
			return 0, err
		}
		st.results = rs
	}
	rs := st.results

	// The results above the mark, or the whole outbox of an agent restored
	// from an older generation (the file may hold results of its lost
	// future); see backend.Unindexed.
	results, mark := backend.Unindexed(snap, st.indexedSeq)
	var buf bytes.Buffer
	for _, r := range results {
		line, err := encodeLine(r, now)
		if err != nil {
			return 0, err
		}
		buf.Write(line)
	}
	if n := len(results); n > 0 {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := appendSync(path, buf.Bytes()); err != nil {
			return 0, err
		}
		if err := appendSync(s.path(id, extCopy), buf.Bytes()); err != nil {
			return 0, err
		}
		rs.lines += n
		rs.appended += n
		if rs.oldest == 0 {
			rs.oldest = now
		}
	}
	if s.compactionDue(rs, now) {
		if err := s.compact(id, rs, now); err != nil {
			return 0, fmt.Errorf("compact %s: %w", path, err)
		}
	}
	return mark, nil
}

// slack is how far past MaxTasks the file may grow, and how many appends
// justify a compaction for age: a quarter of MaxTasks, at least 16.
func (s *Store) slack() int { return max(16, s.ret.MaxTasks/4) }

func (s *Store) compactionDue(rs *resultsState, now int64) bool {
	if s.ret.MaxTasks > 0 && rs.lines >= s.ret.MaxTasks+s.slack() {
		return true
	}
	if s.ret.MaxAgeMs <= 0 || rs.oldest == 0 || rs.oldest >= now-s.ret.MaxAgeMs {
		return false
	}
	return rs.appended >= s.slack() || now-rs.lastCompact >= s.ret.MaxAgeMs/8
}

// scan counts the lines of the results file, finds its oldest result, and
// cuts off a torn last line left by a crash during an append.
func (s *Store) scan(path string, now int64) (*resultsState, error) {
	rs := &resultsState{lastCompact: now}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return rs, nil
	}
	if err != nil {
		return nil, err
	}
	if end := bytes.LastIndexByte(data, '\n') + 1; end < len(data) {
		s.log.Warn().Str("file", path).Int("bytes", len(data)-end).
			Msg("file: cutting off the torn last line of the task index (an append was interrupted)")
		if err := truncateSync(path, int64(end)); err != nil {
			return nil, err
		}
		data = data[:end]
	}
	bad := 0
	for line := range bytes.Lines(data) {
		rs.lines++
		_, at, err := decodeLine(bytes.TrimSuffix(line, []byte{'\n'}))
		if err != nil {
			bad++
			continue
		}
		if rs.oldest == 0 || at < rs.oldest {
			rs.oldest = at
		}
	}
	if bad > 0 {
		s.log.Warn().Str("file", path).Int("lines", bad).Msg("file: damaged lines in the task index are ignored")
	}
	return rs, nil
}

// compact rewrites the results file with, for each task, its last valid
// line, within the age and the newest MaxTasks.
func (s *Store) compact(id string, rs *resultsState, now int64) error {
	path := s.path(id, extResults)
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	type entry struct {
		line []byte
		task string
		at   int64
	}
	var entries []entry
	last := map[string]int{}
	for line := range bytes.Lines(data) {
		r, at, err := decodeLine(bytes.TrimSuffix(line, []byte{'\n'}))
		if err != nil || s.ret.MaxAgeMs > 0 && at < now-s.ret.MaxAgeMs {
			continue
		}
		last[r.TaskID] = len(entries)
		entries = append(entries, entry{line, r.TaskID, at})
	}
	var keep []entry
	for i, e := range entries {
		if last[e.task] == i {
			keep = append(keep, e)
		}
	}
	if s.ret.MaxTasks > 0 && len(keep) > s.ret.MaxTasks {
		keep = keep[len(keep)-s.ret.MaxTasks:]
	}
	var buf bytes.Buffer
	*rs = resultsState{lastCompact: now}
	for _, e := range keep {
		buf.Write(e.line)
		rs.lines++
		if rs.oldest == 0 || e.at < rs.oldest {
			rs.oldest = e.at
		}
	}
	return replaceBoth(path, s.tmpPath(id, extResults), s.path(id, extCopy), s.tmpPath(id, extCopy), buf.Bytes())
}

// replaceBoth writes data to the results file path and to its copy, each
// through a temporary file, fsynced and renamed. The copy is replaced after
// the file, so that one of the two is whole at every instant. The caller's
// directory fsync makes the renames durable.
func replaceBoth(path, tmp, copyPath, copyTmp string, data []byte) error {
	for _, f := range [][2]string{{path, tmp}, {copyPath, copyTmp}} {
		if err := writeSync(f[1], data); err != nil {
			return err
		}
		if err := atomicfile.Rename(f[1], f[0]); err != nil {
			os.Remove(f[1])
			return err
		}
	}
	return nil
}

// repairResults compares the task index with its copy, which every Save
// writes alike, and when they differ (a line damaged, a file cut short or
// missing) rewrites both with every line either holds intact, in order,
// and warns with the number of results recovered and lost. A torn last
// line, left by a crash during an append, is not a loss: the next Save
// indexes its result again. An index written before the copy existed gets
// its copy.
func (s *Store) repairResults(id string) error {
	path, copyPath := s.path(id, extResults), s.path(id, extCopy)
	a, aErr := os.ReadFile(path)
	b, bErr := os.ReadFile(copyPath)
	switch {
	case aErr != nil && !errors.Is(aErr, fs.ErrNotExist):
		return aErr
	case bErr != nil && !errors.Is(bErr, fs.ErrNotExist):
		return bErr
	case aErr != nil && bErr != nil:
		return nil
	case bErr != nil && len(a) > 0:
		// No copy yet: an index from before the copy, or a copy lost.
		s.log.Info().Str("agent", id).Str("file", copyPath).Msg("file: the task index had no copy; writing one")
	}
	la, badA, nA := validLines(a)
	lb, badB, nB := validLines(b)
	merged := mergeLines(la, lb)
	lost := max(nA, nB) - len(merged)
	recovered := len(merged) - min(len(la), len(lb))
	if !bytes.Equal(a, b) {
		var buf bytes.Buffer
		for _, l := range merged {
			buf.Write(l)
			buf.WriteByte('\n')
		}
		if err := replaceBoth(path, s.tmpPath(id, extResults), copyPath, s.tmpPath(id, extCopy), buf.Bytes()); err != nil {
			return err
		}
		if err := atomicfile.SyncDir(s.dir); err != nil {
			return err
		}
	}
	if badA+badB == 0 && lost <= 0 && recovered == 0 {
		return nil
	}
	ev := s.log.Warn()
	if lost > 0 {
		ev = s.log.Error()
	}
	ev.Str("agent", id).Str("file", path).Int("damaged_lines", badA).Int("damaged_copy_lines", badB).
		Int("recovered", recovered).Int("lost", max(lost, 0)).
		Msgf("file: the task index was damaged: %d results recovered from its copy, %d lost", recovered, max(lost, 0))
	return nil
}

// dropUncommitted cuts from the end of the agent's task index, and of its
// copy, the results above mark, the indexed seq of the last committed
// generation: a save appends its results (step 1) before its snapshot
// takes the current name (the commit point), so one killed in between
// leaves results of a tick the agent no longer has. Served by TaskResult,
// they told a client the outcome of a task that the agent, back at the
// committed tick, then decides again (unknown_outcome for a
// non-idempotent call cut short). Called by Load, after repairResults.
func (s *Store) dropUncommitted(id string, mark uint64) error {
	dropped := 0
	for _, path := range []string{s.path(id, extResults), s.path(id, extCopy)} {
		data, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		end, n := committedEnd(data, mark)
		if n == 0 {
			continue
		}
		if err := truncateSync(path, int64(end)); err != nil {
			return err
		}
		dropped = max(dropped, n)
	}
	if dropped > 0 {
		s.log.Warn().Str("agent", id).Str("file", s.path(id, extResults)).Int("dropped", dropped).Uint64("indexed_seq", mark).
			Msgf("file: dropped %d results that an interrupted save indexed but did not commit", dropped)
	}
	return nil
}

// committedEnd returns where the results file data ends once the results
// above mark at its end are cut, and how many they are (0: nothing to
// cut). It stops at the first line from the end that is at or below mark,
// or that does not decode (repairResults' concern).
func committedEnd(data []byte, mark uint64) (end, n int) {
	end = bytes.LastIndexByte(data, '\n') + 1 // a torn last line goes with the cut
	for end > 0 {
		start := bytes.LastIndexByte(data[:end-1], '\n') + 1
		r, _, err := decodeLine(data[start : end-1])
		if err != nil || r == nil || r.Seq <= mark {
			break
		}
		end, n = start, n+1
	}
	if n == 0 {
		return len(data), 0
	}
	return end, n
}

// validLines returns the lines of a results file that pass their checks,
// how many did not, and how many lines the file held (a torn last line
// not counted).
func validLines(data []byte) (good [][]byte, bad, total int) {
	if end := bytes.LastIndexByte(data, '\n') + 1; end < len(data) {
		data = data[:end]
	}
	for line := range bytes.Lines(data) {
		line = bytes.TrimSuffix(line, []byte{'\n'})
		total++
		if _, _, err := decodeLine(line); err != nil {
			bad++
			continue
		}
		good = append(good, line)
	}
	return good, bad, total
}

// mergeLines returns the lines of a and b, each once, in the order the two
// files were written in: a line only one of them holds goes where it was.
func mergeLines(a, b [][]byte) [][]byte {
	at := make(map[string]int, len(a))
	for i, l := range a {
		at[string(l)] = i
	}
	var out [][]byte
	j := 0 // a[:j] are in out
	for _, l := range b {
		i, ok := at[string(l)]
		switch {
		case !ok:
			out = append(out, l)
		case i >= j:
			out = append(out, a[j:i+1]...)
			j = i + 1
		}
	}
	return append(out, a[j:]...)
}

// TaskResult returns the indexed result of a task of the agent: the last
// valid line of the results file for that task.
func (s *Store) TaskResult(ctx context.Context, agentID, taskID string) (*agent.Result, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("file: task result: %w", err)
	}
	if s.agents.Closed() {
		return nil, fmt.Errorf("file: task result %s/%s: %w", agentID, taskID, plugin.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file: task result %s/%s: %w", agentID, taskID, err)
	}
	path := s.path(agentID, extResults)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("file: task result %s/%s: %w", agentID, taskID, plugin.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("file: task result %s/%s: %w", agentID, taskID, err)
	}
	var shown uint64 // see agentState.shown
	if st, _ := s.agents.Get(agentID); st != nil {
		shown = st.shown.Load()
	}
	var found *agent.Result
	damaged := false
	for line := range bytes.Lines(data) {
		if !bytes.HasSuffix(line, []byte{'\n'}) {
			break // an append in progress
		}
		r, _, err := decodeLine(line[:len(line)-1])
		switch {
		case r == nil || r.TaskID != taskID:
		case shown > 0 && r.Seq >= shown:
			// Indexed by a save that has not reached its commit point:
			// killed now, the agent comes back without this result.
		case err != nil:
			damaged = true
		default:
			found, damaged = r, false
		}
	}
	switch {
	case damaged:
		return nil, fmt.Errorf("file: task result %s/%s: the line in %s fails its checksum: %w", agentID, taskID, path, plugin.ErrCorrupt)
	case found == nil:
		return nil, fmt.Errorf("file: task result %s/%s: %w", agentID, taskID, plugin.ErrNotFound)
	}
	return found, nil
}
