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
// returns the damaged parts found, each naming its file, and the bytes
// checked; an error means it could not check.
func Check(ctx context.Context, db *sql.DB, path string) (damage []string, checked int64, err error) {
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
			return nil, 0, err
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
		return nil, 0, err
	default:
		checked += int64(len(b))
		if d := WALDamage(b); d != "" {
			damage = append(damage, path+"-wal: "+d)
		}
	}
	return damage, checked, nil
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
// the page, and the header's salts. The first frame with the salts whose
// checksum fails ends what SQLite replays. It says where, when frames with
// the salts follow it (the end a crash leaves is the last frame only), or
// "" when the log is whole.
func WALDamage(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) < 32 {
		return fmt.Sprintf("its header is cut short (%d bytes)", len(b))
	}
	magic := binary.BigEndian.Uint32(b)
	if magic != 0x377f0682 && magic != 0x377f0683 {
		return fmt.Sprintf("its header's magic number is %#x: SQLite will ignore the whole log", magic)
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
		return "its header fails its checksum: SQLite will ignore the whole log"
	}
	ps := int(binary.BigEndian.Uint32(b[8:]))
	if ps == 1 {
		ps = 65536
	}
	if ps < 512 || ps > 65536 || ps&(ps-1) != 0 {
		return fmt.Sprintf("its header names a page size of %d", ps)
	}
	salt := b[16:24]
	frame := 24 + ps
	bad := -1
	for i, off := 0, 32; off+frame <= len(b); i, off = i+1, off+frame {
		h := b[off : off+24]
		if string(h[8:16]) != string(salt) {
			if bad < 0 {
				return "" // the end of this log's frames: older ones follow
			}
			break
		}
		if bad >= 0 {
			return fmt.Sprintf("frame %d (offset %d) fails its checksum: SQLite will drop it and the %d frames after it, with their commits, at its next open",
				bad, 32+bad*frame, i-bad-1+countSalted(b[off:], salt, frame))
		}
		n0, n1 := sum(s0, s1, h[:8])
		n0, n1 = sum(n0, n1, b[off+24:off+frame])
		if n0 != binary.BigEndian.Uint32(h[16:]) || n1 != binary.BigEndian.Uint32(h[20:]) {
			bad = i
			continue
		}
		s0, s1 = n0, n1
	}
	return ""
}

// countSalted counts the frames at the start of b that carry salt.
func countSalted(b, salt []byte, frame int) int {
	n := 0
	for off := 0; off+frame <= len(b) && string(b[off+8:off+16]) == string(salt); off += frame {
		n++
	}
	return n
}
