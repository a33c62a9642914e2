package file

import (
	"os"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestScrub: a healthy agent's files read back without damage; a line of
// the task index damaged on the disk is found and both files rewritten from
// the copy, so that the result is served; a damaged snapshot file is named.
func TestScrub(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir, Options{})
	for tick := uint64(1); tick <= 5; tick++ {
		mustSave(t, s, storagetest.Sample("sc", tick))
	}
	rep, err := s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 0 || rep.Bytes == 0 {
		t.Fatalf("healthy: %+v, %v", rep, err)
	}
	path := s.path("sc", extResults)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "task-2-b")
	if i < 0 {
		t.Fatalf("no task-2-b in the task index:\n%s", b)
	}
	b[i+1] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 1 || len(rep.Repaired) != 1 {
		t.Fatalf("damaged index: %+v, %v; want one damage, repaired", rep, err)
	}
	if rep, err = s.Scrub(ctx, "sc"); err != nil || len(rep.Damage) != 0 {
		t.Fatalf("after the repair: %+v, %v", rep, err)
	}
	if r, err := s.TaskResult(ctx, "sc", "task-2-b"); err != nil || r.TaskID != "task-2-b" {
		t.Fatalf("task-2-b after the repair: %v, %v", r, err)
	}
	mustSave(t, s, storagetest.Sample("sc", 6))

	cur := s.path("sc", extCurrent)
	c, err := os.ReadFile(cur)
	if err != nil {
		t.Fatal(err)
	}
	c[len(c)/2] ^= 0x01
	if err := os.WriteFile(cur, c, 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err = s.Scrub(ctx, "sc")
	if err != nil || len(rep.Damage) != 1 || !strings.Contains(rep.Damage[0], cur) {
		t.Fatalf("damaged snapshot: %+v, %v; want it named", rep, err)
	}
}
