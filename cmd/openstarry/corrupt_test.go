package main

import (
	"bytes"
	"crypto/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/storage/bbolt/bolttest"
)

// runTasks starts the agent, runs n echo tasks to completion and stops it
// with SIGTERM.
func runTasks(t *testing.T, data, agentID string, n int) {
	t.Helper()
	c := startChild(t, true, "run", "--agent", agentID, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
	base := c.url()
	for i := 0; i < n; i++ {
		id := "t" + string(rune('a'+i))
		if code, body, err := postTask(t.Context(), base, agentID, []byte(`{"task_id":"`+id+`","input":"x"}`)); err != nil || code != 202 {
			t.Fatalf("task %s: %d %s %v", id, code, body, err)
		}
		waitTask(t, base, agentID, id)
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := c.wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("stop: %d %v\n%s", code, err, c.logs())
	}
}

// TestCorruptLatestGeneration: bytes flipped in the newest record make the
// agent come up from the previous generation, and say so.
func TestCorruptLatestGeneration(t *testing.T) {
	data := t.TempDir()
	runTasks(t, data, "c1", 3)
	path := filepath.Join(data, "agents", "c1", "state.db")
	if _, err := bolttest.FlipGenerations(path, true); err != nil {
		t.Fatal(err)
	}
	c := startChild(t, true, "run", "--agent", "c1", "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
	c.url()
	logs := c.logs()
	if !strings.Contains(logs, "skipping a corrupt snapshot generation") {
		t.Fatalf("no warning about the corrupt generation:\n%s", logs)
	}
	m := hydratedRe.FindStringSubmatch(logs)
	if m == nil || m[1] == "0" {
		t.Fatalf("agent did not hydrate from the previous generation:\n%s", logs)
	}
	if strings.Contains(logs, "fresh agent") {
		t.Fatalf("a corrupt store became a blank agent:\n%s", logs)
	}
	t.Logf("came back at tick %s", m[1])
}

// TestGarbageStore: a store file that is not a store gives a clear error,
// a non-zero exit, and the file is left as it was.
func TestGarbageStore(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "agents", "g1")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 64<<10)
	_, _ = rand.Read(garbage)
	path := filepath.Join(dir, "state.db")
	if err := os.WriteFile(path, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "--agent", "g1", "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt"},
		{"snapshot", "show", "--agent", "g1", "--data", data},
	} {
		c := startChild(t, false, args...)
		code, err := c.wait(20 * time.Second)
		if err != nil || code == 0 {
			t.Fatalf("%v: exit %d, %v", args, code, err)
		}
		if logs := c.logs(); !strings.Contains(logs, "stored snapshot is corrupt") || !strings.Contains(logs, path) {
			t.Fatalf("%v: unclear error:\n%s", args, logs)
		}
		after, _ := os.ReadFile(path)
		if !bytes.Equal(after, garbage) {
			t.Fatalf("%v changed the garbage file", args)
		}
	}
}
