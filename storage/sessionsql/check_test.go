package sessionsql

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStoreCheck: the scrub's check of sessions.db finds nothing in a
// healthy database, and names the file when a page of it is damaged on
// the disk.
func TestStoreCheck(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "sessions.db")
	s, err := OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, `CREATE TABLE scrub_test (x BLOB)`); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 200; i++ {
		if _, err := s.db.ExecContext(ctx, `INSERT INTO scrub_test VALUES (randomblob(500))`); err != nil {
			t.Fatal(err)
		}
	}
	damage, _, n, err := s.Check(ctx)
	if err != nil || len(damage) != 0 || n == 0 {
		t.Fatalf("healthy: %q, %d bytes, %v", damage, n, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A page of the table's tree zeroed: the last but one of the file.
	clear(b[len(b)-2*4096 : len(b)-4096])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err = OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	damage, _, _, err = s.Check(ctx)
	if err != nil || len(damage) == 0 || !strings.HasPrefix(damage[0], s.path) {
		t.Fatalf("damaged: %q, %v; want damage naming %s", damage, err, s.path)
	}
	t.Logf("found: %s", damage[0])
}
