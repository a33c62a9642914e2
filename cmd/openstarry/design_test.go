package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

func TestDesignServeRefusesInvalid(t *testing.T) {
	broken := filepath.Join("..", "..", "core", "design", "testdata", "broken")
	var out, errb bytes.Buffer
	err := runDesignServe(context.Background(), &out, &errb, zerolog.Nop(), designServeFlags{dir: broken, listen: "127.0.0.1:0"})
	if err == nil || err.(*exitcode.Error).Code != 1 || !strings.Contains(err.Error(), "refusing to start: 23 errors in 10 templates") {
		t.Fatalf("err = %v", err)
	}
	if n := strings.Count(errb.String(), "\n"); n != 23 {
		t.Errorf("%d error lines, want 23:\n%s", n, errb.String())
	}

	err = runDesignServe(context.Background(), &out, &errb, zerolog.Nop(), designServeFlags{dir: t.TempDir(), listen: "127.0.0.1:0"})
	if err == nil || !strings.Contains(err.Error(), "no templates") {
		t.Fatalf("empty dir: %v", err)
	}
	dir := t.TempDir()
	copyShipped(t, dir, "master.json", "worker.json")
	pub := filepath.Join(t.TempDir(), "k")
	if _, _, code := runCmd(t, newTemplatesCmd(), "keygen", "--out", pub); code != 0 {
		t.Fatal("keygen")
	}
	err = runDesignServe(context.Background(), &out, &errb, zerolog.Nop(), designServeFlags{dir: dir, listen: "127.0.0.1:0", keys: []string{pub + ".pub"}})
	if err == nil || !strings.Contains(err.Error(), "refusing to start: 2 errors") {
		t.Fatalf("unsigned with --trusted-key: %v", err)
	}
}

func TestDesignServeServes(t *testing.T) {
	dir := t.TempDir()
	copyShipped(t, dir, "master.json", "worker.json", "echo.json")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &logbuf.Buffer{}
	done := make(chan error, 1)
	go func() {
		done <- runDesignServe(ctx, out, io.Discard, zerolog.Nop(), designServeFlags{dir: dir, listen: "127.0.0.1:0", shutdown: time.Second})
	}()
	re := regexp.MustCompile(`on (http://127\.0\.0\.1:\d+)`)
	var base string
	if err := wait.Poll(5*time.Second, func() error {
		m := re.FindStringSubmatch(out.String())
		if m == nil {
			return errors.New("no address printed")
		}
		base = m[1]
		return nil
	}); err != nil {
		t.Fatalf("server did not start: %q", out.String())
	}
	if !strings.Contains(out.String(), "serving 3 templates from "+dir) {
		t.Errorf("banner %q", out.String())
	}
	res, err := http.Get(base + "/templates/master")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	want, _ := os.ReadFile(filepath.Join(dir, "master.json"))
	if res.StatusCode != 200 || !bytes.Equal(body, want) || res.Header.Get("ETag") == "" {
		t.Fatalf("GET master: %d %s", res.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("server did not stop")
	}
}
