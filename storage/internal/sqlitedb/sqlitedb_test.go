package sqlitedb

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

func TestOpenPrivateAndPragmas(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		fk   int
	}{
		{"foreign keys", Options{ForeignKeys: true, MaxOpenConns: 2}, 1},
		{"plain", Options{}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			abs := filepath.Join(t.TempDir(), "sub", "x.db")
			// An older version left the -wal readable by others.
			if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(abs+"-wal", nil, 0o644); err != nil {
				t.Fatal(err)
			}
			db, tightened, err := Open(abs, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := db.Exec(`CREATE TABLE t (x INTEGER)`); err != nil {
				t.Fatal(err)
			}
			if runtime.GOOS != "windows" && !slices.Equal(tightened, []string{abs + "-wal"}) {
				t.Errorf("tightened %v, want the -wal", tightened)
			}
			for pragma, want := range map[string]any{"journal_mode": "wal", "synchronous": 2, "busy_timeout": 5000, "foreign_keys": tc.fk} {
				var got any
				if err := db.QueryRow("PRAGMA " + pragma).Scan(&got); err != nil {
					t.Fatal(err)
				}
				if g, ok := got.(string); ok {
					got = strings.ToLower(g)
				} else if n, ok := got.(int64); ok {
					got = int(n)
				}
				if got != want {
					t.Errorf("PRAGMA %s = %v, want %v", pragma, got, want)
				}
			}
			if runtime.GOOS == "windows" {
				return
			}
			for _, p := range []string{abs, abs + "-wal", abs + "-shm"} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Errorf("%s: %v", filepath.Base(p), err)
				} else if fi.Mode().Perm() != 0o600 {
					t.Errorf("%s: %v; want 0600", filepath.Base(p), fi.Mode())
				}
			}
		})
	}
}

func TestMigrate(t *testing.T) {
	ctx := context.Background()
	db, _, err := Open(filepath.Join(t.TempDir(), "m.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	steps := [][]string{{`CREATE TABLE a (x INTEGER)`, `INSERT INTO a VALUES (1)`}}
	later := append(steps, []string{`CREATE TABLE b (y INTEGER)`})
	for i, s := range [][][]string{steps, steps, later, later} {
		if err := Migrate(ctx, db, s); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	var v, rows int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&v); err != nil || v != 2 {
		t.Fatalf("user_version %d (%v), want 2", v, err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM a`).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("step 1 ran %d times (%v), want once", rows, err)
	}
	if err := Migrate(ctx, db, steps); err == nil || !strings.Contains(err.Error(), "newer than this build") {
		t.Fatalf("Migrate of a newer database: %v; want a refusal", err)
	}
}
