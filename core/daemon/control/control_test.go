package control_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

func TestResultTaskID(t *testing.T) {
	if got := control.ResultTaskID("w1", "t1"); got != "worker_result:w1:t1" {
		t.Fatal(got)
	}
	long := control.ResultTaskID(strings.Repeat("w", 100), strings.Repeat("t", 100))
	if len(long) > agent.MaxIDLen || agent.ValidateID(long) != nil || long != control.ResultTaskID(strings.Repeat("w", 100), strings.Repeat("t", 100)) {
		t.Fatalf("long id %q", long)
	}
}

func TestNewAndDiscover(t *testing.T) {
	for _, bad := range []string{"http://x", "::", "ftp://h"} {
		if _, err := control.New(bad, "t"); err == nil {
			t.Errorf("control.New(%q) accepted", bad)
		}
	}
	dir := t.TempDir()
	if _, err := control.Discover(dir); !errors.Is(err, control.ErrNoDaemon) {
		t.Fatalf("no daemon: %v", err)
	}
	run := filepath.Join(dir, "run")
	if err := os.MkdirAll(run, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := control.WriteToken(run, "tok"); err != nil {
		t.Fatal(err)
	}
	// A token without a listener: the daemon died.
	c, err := control.Discover(dir)
	if err == nil {
		_, err = c.Status(context.Background())
	}
	if !errors.Is(err, control.ErrNoDaemon) {
		t.Fatalf("dead daemon: %v", err)
	}
	t.Setenv(control.EnvAddr, "")
	if _, err := control.FromEnv(); !errors.Is(err, control.ErrNoDaemon) {
		t.Fatalf("FromEnv: %v", err)
	}
}
