package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestDiskFull runs an agent on a small tmpfs that fills up: the task whose
// save fails is answered 500 not_durable, the agent exits non-zero with a
// log line that says why, and once there is room again every task it had
// accepted is there and runs; the refused one was never stored. It needs
// root to mount the tmpfs (CI runs as root), and skips without it.
func TestDiskFull(t *testing.T) {
	for _, store := range []struct{ name, url string }{{"bbolt", "bbolt://"}, {"sqlite", "sqlite://%s/state.db"}} {
		t.Run(store.name, func(t *testing.T) { diskFullRun(t, store.url) })
	}
}

func diskFullRun(t *testing.T, storeURL string) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", "-l", mnt).Run() })
	data := filepath.Join(mnt, "data")
	if strings.Contains(storeURL, "%s") {
		storeURL = fmt.Sprintf(storeURL, data)
	}
	const agentID = "full"
	args := []string{"run", "--agent", agentID, "--data", data, "--store", storeURL, "--listen", "127.0.0.1:0", "--no-mqtt"}
	c := startChild(t, true, args...)
	base := c.url()

	// Leave about 400 KiB free.
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	if err := os.WriteFile(filepath.Join(mnt, "filler"), make([]byte, free-400<<10), 0o600); err != nil {
		t.Fatal(err)
	}

	input := strings.Repeat("z", 48<<10)
	var accepted []string
	refused := ""
	for i := 0; refused == ""; i++ {
		if i == 200 {
			t.Fatalf("200 tasks of 48 KiB fit in 400 KiB\n%s", c.logs())
		}
		id := fmt.Sprintf("big-%03d", i)
		body, _ := json.Marshal(map[string]any{"task_id": id, "input": input})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		code, resp, err := postTask(ctx, base, agentID, body)
		cancel()
		switch {
		case err == nil && code == 202:
			accepted = append(accepted, id)
		case err == nil && code == 500 && bytes.Contains(resp, []byte("not_durable")):
			refused = id
		case err != nil || code == 503 && bytes.Contains(resp, []byte(`"stopping"`)):
			// A tick's save failed first: the agent stopped, and exits.
			refused = "none"
		default:
			t.Fatalf("task %s: %d %s", id, code, resp)
		}
	}
	code, err := c.wait(20 * time.Second)
	if err != nil || code == 0 {
		t.Fatalf("the agent with a full disk: exit %d, %v\n%s", code, err, c.logs())
	}
	full := strings.Contains(c.logs(), "no space left on device") || strings.Contains(c.logs(), "disk is full") // SQLite's words
	if !full || !strings.Contains(c.logs(), "save failed") {
		t.Fatalf("no log line says the disk is full:\n%s", c.logs())
	}
	if len(accepted) == 0 {
		t.Fatalf("no task fitted before the disk was full\n%s", c.logs())
	}

	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	c = startChild(t, true, args...)
	base = c.url()
	for _, id := range accepted {
		wait.Until(t, 30*time.Second, "task "+id+" done", func() error {
			code, st, err := getTask(base, agentID, id)
			if err != nil || code != 200 {
				t.Fatalf("accepted task %s after the restart: %d %v\n%s", id, code, err, c.logs())
			}
			if st.Status != "done" {
				return fmt.Errorf("task %s still %s", id, st.Status)
			}
			return nil
		})
	}
	if refused != "none" {
		if code, _, _ := getTask(base, agentID, refused); code != 404 {
			t.Fatalf("the refused task %s is known after the restart: %d", refused, code)
		}
	}
	t.Logf("%d tasks accepted before the disk was full, %s refused", len(accepted), refused)
}
