package sqlitedb

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// maxDamage bounds the damaged parts Check names.
const maxDamage = 8

// Check reads the database at path, open as db, and its write-ahead log
// back from the disk, for the scrub (docs/storage-damage.md): PRAGMA
// quick_check reads every page through the log, and WALDamage verifies the
// log's frames as SQLite does only when it next opens the database. It
// returns the damaged parts found, each naming its file, those repaired (a
// damaged log frame whose page a later frame holds too: a checkpoint
// leaves it behind), and the bytes checked; an error means it could not
// check.
func Check(ctx context.Context, db *sql.DB, path string) (damage, repaired []string, checked int64, err error) {
	rows, err := db.QueryContext(ctx, "PRAGMA quick_check")
	if err == nil {
		for rows.Next() {
			var line string
			if err = rows.Scan(&line); err != nil {
				break
			}
			if line != "ok" && !strings.HasPrefix(line, "*** in database ") && len(damage) < maxDamage {
				damage = append(damage, path+": "+line)
			}
		}
		if err == nil {
			err = rows.Err()
		}
		rows.Close()
	}
	if err != nil {
		if !corrupt(err) {
			return nil, nil, 0, err
		}
		damage = append(damage, fmt.Sprintf("%s: %v", path, err))
	}
	var pages, size int64
	if db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages) == nil && db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size) == nil {
		checked += pages * size
	}
	b, err := os.ReadFile(path + "-wal")
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, nil, 0, err
	default:
		checked += int64(len(b))
		d, superseded := walScan(b)
		if d == "" {
			break
		}
		damage = append(damage, path+"-wal: "+d)
		if !superseded {
			break
		}
		// Every damaged frame holds a page a later good frame holds too:
		// a checkpoint copies the good ones into the database and empties
		// the log. It can be kept from finishing by another connection
		// reading an older snapshot (busy), then nothing is repaired.
		var busy, logged, moved int64
		if err := db.QueryRowContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)").Scan(&busy, &logged, &moved); err == nil && busy == 0 {
			repaired = append(repaired, path+"-wal: "+d+"; every damaged frame was superseded by a later one: checkpointed into the database, and the log emptied")
		}
	}
	return damage, repaired, checked, nil
}

// corrupt reports whether SQLite said the file is damaged.
func corrupt(err error) bool {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
			return true
		}
	}
	return false
}

// WALDamage checks the frames of a write-ahead log as SQLite does when it
// opens the database (https://www.sqlite.org/fileformat2.html#walformat):
// a 32-byte header with its checksum, then frames of a 24-byte header and
// a page, each with the running checksum of the header's first 8 bytes and
// the page, and the header's salts. SQLite replays the frames up to the
// first that fails; a damaged frame with good frames of the log after it
// is damage (the end a crash leaves is the last frames only). It says
// where, or "" when the log is whole.
func WALDamage(b []byte) string {
	msg, _ := walScan(b)
	return msg
}

// walScan is WALDamage that also reports whether every damaged frame is
// superseded: a good frame after it holds the same page, so that a
// checkpoint, which copies each page's newest frame into the database
// (from the log index SQLite keeps in memory), never reads it, and the
// truncated log no longer holds it.
func walScan(b []byte) (msg string, superseded bool) {
	if len(b) == 0 {
		return "", false
	}
	if len(b) < 32 {
		return fmt.Sprintf("its header is cut short (%d bytes)", len(b)), false
	}
	magic := binary.BigEndian.Uint32(b)
	if magic != 0x377f0682 && magic != 0x377f0683 {
		return fmt.Sprintf("its header's magic number is %#x: SQLite will ignore the whole log", magic), false
	}
	var order binary.ByteOrder = binary.LittleEndian
	if magic == 0x377f0683 {
		order = binary.BigEndian
	}
	sum := func(s0, s1 uint32, p []byte) (uint32, uint32) {
		for i := 0; i+8 <= len(p); i += 8 {
			s0 += order.Uint32(p[i:]) + s1
			s1 += order.Uint32(p[i+4:]) + s0
		}
		return s0, s1
	}
	s0, s1 := sum(0, 0, b[:24])
	if s0 != binary.BigEndian.Uint32(b[24:]) || s1 != binary.BigEndian.Uint32(b[28:]) {
		return "its header fails its checksum: SQLite will ignore the whole log", false
	}
	ps := int(binary.BigEndian.Uint32(b[8:]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps > 65536 || ps&(ps-1) != 0 {
		return fmt.Sprintf("its header names a page size of %d", ps), false
	}
	salt := string(b[16:24])
	frame := 24 + ps
	// good[i]: frame i carries the salts and checks against the checksum
	// its predecessor stores (the header's for frame 0): intact, whatever
	// happened before it.
	var good []bool
	last := -1 // the last good frame: the log's frames end there
	prev0, prev1 := s0, s1
	for off := 32; off+frame <= len(b); off += frame {
		h := b[off : off+24]
		n0, n1 := sum(prev0, prev1, h[:8])
		n0, n1 = sum(n0, n1, b[off+24:off+frame])
		ok := string(h[8:16]) == salt && n0 == binary.BigEndian.Uint32(h[16:]) && n1 == binary.BigEndian.Uint32(h[20:])
		good = append(good, ok)
		if ok {
			last = len(good) - 1
		}
		prev0, prev1 = binary.BigEndian.Uint32(h[16:]), binary.BigEndian.Uint32(h[20:])
	}
	first, bad := -1, 0
	superseded = true
	for i := 0; i < last; i++ {
		if good[i] {
			continue
		}
		if first < 0 {
			first = i
		}
		bad++
		pg := binary.BigEndian.Uint32(b[32+i*frame:])
		later := false
		for j := i + 1; j <= last && pg != 0; j++ {
			if good[j] && binary.BigEndian.Uint32(b[32+j*frame:]) == pg {
				later = true
				break
			}
		}
		superseded = superseded && later
	}
	if first < 0 {
		return "", false
	}
	return fmt.Sprintf("frame %d (offset %d) fails its checksum (%d damaged frames in all): SQLite will drop it and the %d frames after it, with their commits, at its next open",
		first, 32+first*frame, bad, last-first), superseded
}
