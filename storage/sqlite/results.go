package sqlite

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/sqlite/internal/record"
)

// The results side record: what a damaged write-ahead log cannot take.
//
// SQLite drops the commit whose WAL frame fails its checksum and every
// commit after it (mark.go); the results those commits indexed were served,
// and their tasks acknowledged. So after each commit that indexed results,
// Save also appends them to a file beside the generation mark,
//
//	{database}-gen/.results-{agent_id}       the newest records
//	{database}-gen/.oldresults-{agent_id}    the ones before them
//
// (an agent id never starts with a dot, so these never meet a mark), one
// record per result: the CRC-32C of the rest (4 bytes), its length (4
// bytes), the generation that committed it (8 bytes, all big endian) and
// the result's JSON. When the file passes sideSize it becomes the old one
// and a new one starts, so that the two hold at least the last sideSize
// bytes of results: more than the commits of a write-ahead log between two
// checkpoints (SQLite checkpoints every 1,000 pages). Like the mark it is
// written after the commit and without an fsync of its own: damage to the
// log finds data at rest, and a power cut that took the file's last write
// took nothing the database had not made durable.
//
// When Load finds that the database went back (the mark is ahead of it),
// it puts back into the task index every result of the side record that a
// lost generation committed and the index does not hold: their tasks
// answer as they did before the damage, though the agent goes on from the
// older tick. A damaged record of the side record is skipped.

// sideSize is the size at which the side record starts a new file.
const sideSize = 128 << 10

const sideHeader = 16

func (s *Store) sidePaths(id string) (cur, old string) {
	dir, name := filepath.Split(s.markPath(id))
	return filepath.Join(dir, ".results-"+name), filepath.Join(dir, ".oldresults-"+name)
}

// writeResults appends the results that generation gen indexed to the
// agent's side record. A failure is logged: the commit stands, only the
// copy is missing.
func (s *Store) writeResults(id string, gen uint64, results []*agent.Result) {
	if len(results) == 0 {
		return
	}
	var b []byte
	for i := range results {
		js, err := json.Marshal(results[i])
		if err != nil {
			continue
		}
		start := len(b)
		b = append(b, make([]byte, sideHeader)...)
		binary.BigEndian.PutUint32(b[start+4:], uint32(len(js)))
		binary.BigEndian.PutUint64(b[start+8:], gen)
		b = append(b, js...)
		binary.BigEndian.PutUint32(b[start:], crc32.Checksum(b[start+4:], markTable))
	}
	cur, old := s.sidePaths(id)
	err := func() error {
		if fi, err := os.Stat(cur); err == nil && fi.Size()+int64(len(b)) > sideSize {
			if err := os.Rename(cur, old); err != nil {
				return err
			}
		}
		f, err := os.OpenFile(cur, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}()
	if err != nil {
		s.log.Warn().Str("agent", id).Err(err).Msg("sqlite: could not write the results side record")
	}
}

// sideResults returns the results of the agent's side record that a
// generation above gen committed, the newest of each task, and the number
// of damaged records skipped.
func (s *Store) sideResults(id string, gen uint64) (map[string]agent.Result, int) {
	out := map[string]agent.Result{}
	gens := map[string]uint64{}
	bad := 0
	cur, old := s.sidePaths(id)
	for _, path := range []string{old, cur} {
		b, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		for off := 0; off < len(b); {
			if len(b)-off < sideHeader {
				bad++
				break
			}
			n := int(binary.BigEndian.Uint32(b[off+4:]))
			if n > len(b)-off-sideHeader || crc32.Checksum(b[off+4:off+sideHeader+n], markTable) != binary.BigEndian.Uint32(b[off:]) {
				// Resync on the next record that checks.
				bad++
				next := len(b)
				for i := off + 1; i+sideHeader <= len(b); i++ {
					m := int(binary.BigEndian.Uint32(b[i+4:]))
					if m <= len(b)-i-sideHeader && crc32.Checksum(b[i+4:i+sideHeader+m], markTable) == binary.BigEndian.Uint32(b[i:]) {
						next = i
						break
					}
				}
				off = next
				continue
			}
			g := binary.BigEndian.Uint64(b[off+8:])
			var r agent.Result
			if err := json.Unmarshal(b[off+sideHeader:off+sideHeader+n], &r); err == nil && g > gen && g >= gens[r.TaskID] {
				out[r.TaskID], gens[r.TaskID] = r, g
			}
			off += sideHeader + n
		}
	}
	return out, bad
}

// restoreResults puts back into the task index the results that the lost
// generations above gen committed (see the top of this file), and returns
// how many it put back and the side record's damaged records.
func (s *Store) restoreResults(ctx context.Context, id string, gen uint64) (int, int, error) {
	results, bad := s.sideResults(id, gen)
	if len(results) == 0 {
		return 0, bad, nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, bad, err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	now := s.now().UnixMilli()
	added := 0
	for _, r := range results {
		if agent.ValidateID(r.TaskID) != nil || r.AgentID != "" && r.AgentID != id {
			continue
		}
		data, _, err := record.EncodeElement(r)
		if err != nil {
			return 0, bad, err
		}
		res, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO tasks (agent_id, task_id, seq, indexed_at, result) VALUES (?, ?, ?, ?, ?)`,
			id, r.TaskID, r.Seq, now, data)
		if err != nil {
			return 0, bad, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			added++
		}
	}
	if added > 0 {
		if _, err := tx.ExecContext(ctx, `UPDATE agents SET task_count = task_count + ? WHERE agent_id = ?`, added, id); err != nil {
			return 0, bad, err
		}
	}
	return added, bad, tx.Commit()
}

// removeResults removes the agent's side record.
func (s *Store) removeResults(id string) error {
	var errs []string
	for _, p := range func() []string { c, o := s.sidePaths(id); return []string{c, o} }() {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
