// Package sqlitedb opens the product's SQLite databases (an agent store,
// sessions.db, a memory index) one way, through modernc.org/sqlite (pure
// Go, no cgo), and migrates their schemas.
//
// Every database is a private file: it, its -wal and its -shm are 0600
// whatever the umask (SQLite gives the -wal and -shm the mode of the
// database, so the database is created first, empty, as 0600), and files an
// older version left wider are narrowed. Every connection runs in WAL mode
// with synchronous FULL (a committed transaction is on disk when Commit
// returns) and a 5 s busy timeout, and its write transactions take the
// write lock at BEGIN (_txlock=immediate), so that two writers queue on the
// busy timeout instead of one failing at its first write.
//
// A schema is versioned by PRAGMA user_version: Migrate applies the steps
// a database lacks, in one transaction, and refuses a database newer than
// the steps it knows.
package sqlitedb

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// Options say what a database needs beyond what every one gets.
type Options struct {
	// ForeignKeys enforces foreign keys (PRAGMA foreign_keys) on every
	// connection.
	ForeignKeys bool
	// MaxOpenConns caps the connections of the pool; 0 leaves
	// database/sql's default (no cap).
	MaxOpenConns int
}

// DSN returns the driver's name for the database at the absolute path abs,
// with the pragmas of every connection.
func DSN(abs string, o Options) string {
	p := filepath.ToSlash(abs)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // C:/x on Windows
	}
	dsn := (&url.URL{Scheme: "file", Path: p}).String() +
		"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)"
	if o.ForeignKeys {
		dsn += "&_pragma=foreign_keys(1)"
	}
	return dsn + "&_txlock=immediate"
}

// Open opens the database at the absolute path abs, creating it and its
// directory (0700) if needed. It returns the database and the files (of
// abs, abs-wal and abs-shm) whose mode it narrowed to 0600, for the caller
// to log. Nothing is read yet: the first query opens the file.
func Open(abs string, o Options) (*sql.DB, []string, error) {
	if err := privfs.MkdirAll(filepath.Dir(abs)); err != nil {
		return nil, nil, err
	}
	if err := privfs.Create(abs); err != nil {
		return nil, nil, err
	}
	var tightened []string
	for _, p := range []string{abs, abs + "-wal", abs + "-shm"} {
		changed, err := privfs.Tighten(p)
		if err != nil {
			return nil, nil, err
		}
		if changed {
			tightened = append(tightened, p)
		}
	}
	db, err := sql.Open("sqlite", DSN(abs, o))
	if err != nil {
		return nil, nil, err
	}
	if o.MaxOpenConns > 0 {
		db.SetMaxOpenConns(o.MaxOpenConns)
	}
	return db, tightened, nil
}

// Migrate brings the database to user_version len(steps), applying the
// statements of each missing step in order, all in one transaction (which
// takes the write lock at BEGIN: two processes cannot migrate at once).
// steps[i] takes the database from version i to i+1: append to it, never
// edit or reorder a step that has shipped. A database newer than steps is
// refused rather than guessed at.
func Migrate(ctx context.Context, db *sql.DB, steps [][]string) error {
	latest := len(steps)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit

	var v int
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	switch {
	case v == latest:
		return nil
	case v > latest:
		return fmt.Errorf("schema version %d is newer than this build understands (%d): upgrade openstarry", v, latest)
	}
	for i := v; i < latest; i++ {
		for _, stmt := range steps[i] {
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("migration %d: %w", i+1, err)
			}
		}
	}
	// PRAGMA takes no parameters; latest is a small int we own.
	if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA user_version = %d`, latest)); err != nil {
		return fmt.Errorf("write schema version: %w", err)
	}
	return tx.Commit()
}
