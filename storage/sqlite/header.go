package sqlite

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The copy of the database's first page.
//
// Page 1 of a SQLite database holds its header (the magic string, the page
// size, the size of the file in pages, the free list) and the root of its
// schema: where each table starts. Damage there ("file is not a database",
// "database disk image is malformed") makes every row unreachable, though every
// other page is intact and the write-ahead log holds the newest ones. The
// schema part changes only when the schema does, so Open keeps a copy of
// the page,
//
//	{database}-gen/.page1    "OSP1", CRC-32C of the page (4 bytes, big endian), the page
//
// rewritten when it differs (without an fsync: it is written when the
// schema changes, long before it is needed). When SQLite refuses the file
// as damaged and its page 1 is not the copy, Open keeps the damaged file as
// {database}.damaged-{time}, writes the copy over page 1 with the header's
// size taken from the file and its free list emptied (the pages it listed
// become unused), opens the database again, checks it (PRAGMA
// integrity_check, which may only report those unused pages) and rebuilds
// it (VACUUM), which lists them free again. When any of that fails, the
// damaged file is put back and the database refused, as before.

const page1Magic = "OSP1"

func page1Path(db string) string { return filepath.Join(markDir(db), ".page1") }

// keepPage1 writes the copy of page 1 when it differs from the one kept.
// A failure is logged: only the repair is weakened.
func (s *Store) keepPage1(ctx context.Context) {
	var page []byte
	if err := s.db.QueryRowContext(ctx, `SELECT data FROM sqlite_dbpage WHERE pgno = 1`).Scan(&page); err != nil || len(page) < 512 {
		s.log.Warn().Str("path", s.path).Err(err).Msg("sqlite: could not read the database's first page to keep its copy")
		return
	}
	path := page1Path(s.path)
	if old, ok := readPage1(path); ok && bytes.Equal(old[100:], page[100:]) && bytes.Equal(old[:24], page[:24]) {
		return // the same schema and page size: the copy is good
	}
	b := append([]byte(page1Magic), binary.BigEndian.AppendUint32(nil, crc32.Checksum(page, markTable))...)
	b = append(b, page...)
	// A name of its own: every process of the daemon opens the database.
	f, err := os.CreateTemp(filepath.Dir(path), ".page1.new-*")
	if err == nil {
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(f.Name(), path)
		}
		if err != nil {
			os.Remove(f.Name())
		}
	}
	if err != nil {
		s.log.Warn().Str("path", path).Err(err).Msg("sqlite: could not keep the copy of the database's first page")
	}
}

// readPage1 returns the kept copy of page 1, when it checks.
func readPage1(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 8+512 || string(b[:4]) != page1Magic ||
		crc32.Checksum(b[8:], markTable) != binary.BigEndian.Uint32(b[4:]) {
		return nil, false
	}
	return b[8:], true
}

// restorePage1 writes the kept copy over page 1 of the database at path, as
// the top of this file says, after keeping the damaged file. It returns the
// name the damaged file is kept under, "" when there is no copy to write
// or page 1 already holds it.
func restorePage1(path string) (kept string, err error) {
	page, ok := readPage1(page1Path(path))
	if !ok {
		return "", nil
	}
	ps := int64(binary.BigEndian.Uint16(page[16:]))
	if ps == 1 {
		ps = 65536
	}
	if ps != int64(len(page)) {
		return "", nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	cur := make([]byte, ps)
	n, _ := f.ReadAt(cur, 0)
	if int64(n) == ps && bytes.Equal(cur[100:], page[100:]) && bytes.Equal(cur[:24], page[:24]) {
		return "", nil // not the first page's damage, or already restored
	}
	kept = fmt.Sprintf("%s.damaged-%s", path, time.Now().UTC().Format("20060102T150405Z"))
	if err := copyFile(kept, f); err != nil {
		return "", fmt.Errorf("keeping the damaged %s: %w", path, err)
	}
	fixed := append([]byte(nil), page...)
	pages := max(fi.Size()/ps, 1)
	binary.BigEndian.PutUint32(fixed[28:], uint32(pages)) // the file's size in pages
	binary.BigEndian.PutUint32(fixed[32:], 0)             // no free list trunk
	binary.BigEndian.PutUint32(fixed[36:], 0)             // no free pages
	copy(fixed[92:96], fixed[24:28])                      // the size is valid
	if _, err := f.WriteAt(fixed, 0); err != nil {
		return kept, err
	}
	return kept, f.Sync()
}

// copyFile copies the file src to a new file at dst, synced.
func copyFile(dst string, src *os.File) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, io.NewSectionReader(src, 0, 1<<62))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}

// putBack puts the damaged file kept back in place of the database at path.
func putBack(path, kept string) error {
	if kept == "" {
		return nil
	}
	return os.Rename(kept, path)
}

// checkRestored checks a database whose page 1 was restored: integrity_check
// may report only the pages the emptied free list no longer names; VACUUM
// then rebuilds the file.
func (s *Store) checkRestored(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `PRAGMA integrity_check`)
	if err != nil {
		return err
	}
	var bad []string
	for rows.Next() {
		var msg string
		if err := rows.Scan(&msg); err != nil {
			rows.Close()
			return err
		}
		if msg != "ok" && !strings.Contains(msg, "never used") {
			bad = append(bad, msg)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad[:min(len(bad), 3)], "; "))
	}
	_, err = s.db.ExecContext(ctx, `VACUUM`)
	return err
}
