package storagetest

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/logbuf"
)

// MustEqual fails the test unless got's contract JSON (agent.Encode) is,
// byte for byte, want's. Unlike the suite's own comparison it does not look
// at HistorySeq and QueueSeq: a backend's test that promises them checks
// them itself.
func MustEqual(t testing.TB, got, want *agent.Snapshot) {
	t.Helper()
	if got == nil {
		t.Fatalf("got nil, want tick %d", want.TickIndex)
	}
	g, _ := agent.Encode(got)
	w, _ := agent.Encode(want)
	if !bytes.Equal(g, w) {
		t.Fatalf("loaded snapshot differs:\n got %s\nwant %s", g, w)
	}
}

// LogBuffer collects the lines a store logs (zerolog.New(&buf)), for a test
// to inspect. It is safe for concurrent use. The zero value is empty.
type LogBuffer = logbuf.Buffer

// Gunzip writes the gzip file src (a store written by an earlier version,
// kept in testdata/) uncompressed to dst, creating dst's directory.
func Gunzip(t testing.TB, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
