package sqlite

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The generation mark is the store's own witness of how far each agent got,
// kept outside SQLite's files. SQLite drops WAL frames that fail their
// checksum without a word, and with them every commit after the damage: a
// database whose WAL was damaged opens cleanly, older than what Save
// acknowledged, or without the agent at all. After each commit, Save writes
// the agent's generation and tick into a small file of its own,
//
//	{database}-gen/{agent_id}    "OSG1", generation, tick, Unix ms (8 bytes
//	                             each, big-endian), CRC-32C of the 28 bytes
//
// and Load compares: a database behind its mark went back in time, and Load
// says what was lost (or refuses when nothing of the agent is left). The
// mark is written after the commit and without an fsync of its own, so it
// never runs ahead of what the database made durable; a power cut may lose
// its last write, which only makes the check miss a loss, never report one
// that did not happen. It costs one small write per Save.

const markMagic = "OSG1"

var markTable = crc32.MakeTable(crc32.Castagnoli)

type genMark struct {
	gen, tick uint64
	ms        int64
}

// markDir is the directory of the marks of the database at path.
func markDir(path string) string { return path + "-gen" }

func (s *Store) markPath(id string) string {
	return filepath.Join(markDir(s.path), strings.ReplaceAll(id, ":", "%3A"))
}

// writeMark records that the agent's newest committed generation is gen. A
// failure is logged: the commit stands, only the check is weakened.
func (s *Store) writeMark(id string, gen, tick uint64) {
	p := make([]byte, 0, 32)
	p = append(p, markMagic...)
	p = binary.BigEndian.AppendUint64(p, gen)
	p = binary.BigEndian.AppendUint64(p, tick)
	p = binary.BigEndian.AppendUint64(p, uint64(s.now().UnixMilli()))
	p = binary.BigEndian.AppendUint32(p, crc32.Checksum(p, markTable))
	f, err := os.OpenFile(s.markPath(id), os.O_WRONLY|os.O_CREATE, 0o600)
	if err == nil {
		_, err = f.WriteAt(p, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.log.Warn().Str("agent", id).Err(err).Msg("sqlite: could not write the generation mark")
	}
}

// readMark returns the agent's mark, nil when it has none.
func (s *Store) readMark(id string) (*genMark, error) {
	p, err := os.ReadFile(s.markPath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(p) != 32 || string(p[:4]) != markMagic || crc32.Checksum(p[:28], markTable) != binary.BigEndian.Uint32(p[28:]) {
		return nil, fmt.Errorf("%s is damaged", s.markPath(id))
	}
	return &genMark{gen: binary.BigEndian.Uint64(p[4:]), tick: binary.BigEndian.Uint64(p[12:]), ms: int64(binary.BigEndian.Uint64(p[20:]))}, nil
}

func (m *genMark) when() string {
	return time.UnixMilli(m.ms).UTC().Format(time.RFC3339)
}
