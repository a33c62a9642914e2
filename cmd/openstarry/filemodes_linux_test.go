package main

import (
	"context"
	"fmt"
	"io/fs"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// umask000 runs openstarry with args under umask 000.
func umask000(t *testing.T, args ...string) *child {
	t.Helper()
	return startChildCmd(t, exec.Command("/bin/sh", append([]string{"-c", `umask 000 && exec "$0" "$@"`, binPath}, args...)...))
}

// TestFileModesUmask000: under umask 000, everything the daemon (embedded
// broker, design-layer cache, bbolt store, artifacts, run files) and
// `openstarry run` (SQLite with its -wal and -shm, the file store) create in
// the data directory is private: files 0600 or less, directories 0700.
func TestFileModesUmask000(t *testing.T) {
	data := filepath.Join(dataDir(t), "d") // made by openstarry itself
	tdir := t.TempDir()
	copyShipped(t, tdir, "master.json", "worker.json", "echo.json")
	set, err := templateValidator().LoadDir(tdir)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(design.NewServer(set, zerolog.Nop()))
	defer srv.Close()
	cfg := daemonConfig(t, data, fmt.Sprintf("design:\n  url: %s\n  timeout: 2s\n  retries: 0\nmqtt:\n  broker_listen: 127.0.0.1:0\n  device: dev1\n", srv.URL))
	c := umask000(t, "start", "--config", cfg)
	c.waitLog("boot complete", 30*time.Second)
	if code, body, err := postTask(context.Background(), c.url(), "master", appendTask("m1", "sub/dir/out.txt")); err != nil || code != 202 {
		t.Fatalf("task: %d %s %v", code, body, err)
	}
	wait.For(t, 10*time.Second, "the master's artifact", func() bool {
		_, err := os.Stat(filepath.Join(data, "agents", "master", "artifacts", "sub", "dir", "out.txt"))
		return err == nil
	})
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if code, err := c.wait(20 * time.Second); code != 0 || err != nil {
		t.Fatalf("daemon stop: %d %v\n%s", code, err, c.logs())
	}

	for _, store := range []struct{ name, url string }{
		{"sqlite", "sqlite://" + filepath.Join(data, "sqlite", "state.db")},
		{"file", "file://" + filepath.Join(data, "files")},
	} {
		r := umask000(t, "run", "--agent", "r-"+store.name, "--data", data, "--store", store.url, "--listen", "127.0.0.1:0", "--no-mqtt")
		if code, body, err := postTask(context.Background(), r.url(), "r-"+store.name, appendTask("t1", "a/b.txt")); err != nil || code != 202 {
			t.Fatalf("%s: task: %d %s %v", store.name, code, body, err)
		}
		wait.For(t, 10*time.Second, store.name+"'s result", func() bool {
			code, st, err := getTask(r.url(), "r-"+store.name, "t1")
			return err == nil && code == 200 && st.Status == "done"
		})
		r.kill() // SIGKILL: SQLite's -wal and -shm stay behind
	}
	for _, want := range []string{"sqlite/state.db", "sqlite/state.db-wal", "sqlite/state.db-shm", "templates-cache", "agents/master/state.db"} {
		if _, err := os.Stat(filepath.Join(data, want)); err != nil {
			t.Errorf("expected %s: %v", want, err)
		}
	}

	var files, dirs int
	var bad []string
	err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(data, path)
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			dirs++
			if mode.Perm() != 0o700 {
				bad = append(bad, fmt.Sprintf("%s/ %v", rel, mode.Perm()))
			}
		case mode.IsRegular():
			files++
			if mode.Perm()&0o077 != 0 {
				bad = append(bad, fmt.Sprintf("%s %v", rel, mode.Perm()))
			}
		default:
			bad = append(bad, fmt.Sprintf("%s %v (left behind)", rel, mode))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d files and %d directories checked", files, dirs)
	if len(bad) > 0 {
		t.Fatalf("not private under umask 000:\n%s", strings.Join(bad, "\n"))
	}
	if files < 10 || !regexp.MustCompile(`broker`).MatchString(strings.Join(listFiles(t, data), " ")) {
		t.Fatalf("too little was created to prove anything: %v", listFiles(t, data))
	}
}

func listFiles(t *testing.T, root string) []string {
	var out []string
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(root, path)
			out = append(out, rel)
		}
		return nil
	})
	return out
}
