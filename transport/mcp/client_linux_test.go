//go:build linux

package mcp_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/design"
)

// Close closes the server's stdin and reaps it; a server that stays after
// its stdin ended is terminated (SIGTERM after terminateAfter, 2 s).
func TestStdioCloseReaps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		linger  bool
		atLeast time.Duration
	}{{"exits on EOF", false, 0}, {"lingers", true, 2 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			ledger := filepath.Join(t.TempDir(), "ledger.txt")
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			env := map[string]string{serverEnv: ledger, extraEnv: "1"}
			if tc.linger {
				env[lingerEnv] = "1"
			}
			_, closer := open(t, design.MCPServer{Name: "notes", Command: []string{self, "-test.run=^$"}, Env: env})
			data, err := os.ReadFile(ledger + ".pid")
			if err != nil {
				t.Fatal(err)
			}
			pid, _ := strconv.Atoi(string(data))
			if err := syscall.Kill(pid, 0); err != nil {
				t.Fatalf("server %d not running before close: %v", pid, err)
			}
			start := time.Now()
			if err := closer.Close(); err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < tc.atLeast {
				t.Fatalf("close took %v: the server cannot have been waited for", took)
			}
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("server %d still there after close: %v", pid, err)
			}
		})
	}
}

// A server whose own child keeps its output (and its stderr) open after
// the server died: the session ends at most twice terminateAfter later (Wait
// gives up on stderr, then the reader on stdout), not at the call's timeout
// (20 s here), and the next call starts the server again.
func TestStdioOrphanHoldsOutput(t *testing.T) {
	ledger := filepath.Join(t.TempDir(), "ledger.txt")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tools, closer := open(t, design.MCPServer{Name: "notes",
		Command: []string{"/bin/sh", "-c", `sleep 10 & exec "$0" -test.run='^$'`, self},
		Env:     map[string]string{serverEnv: ledger, extraEnv: "1"}, TimeoutMs: 20000})
	defer closer.Close()
	if _, err := run(t, tools["notes__crash"], `{}`); err == nil || !strings.Contains(err.Error(), "still holds its output") {
		t.Fatalf("crash = %v", err)
	}
	if out, err := run(t, tools["notes__lookup"], `{"key":"k"}`); err != nil || !strings.Contains(out, "value of k") {
		t.Fatalf("a call after the server died = %s, %v", out, err)
	}
}
