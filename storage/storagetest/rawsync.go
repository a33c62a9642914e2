package storagetest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// RawSyncer is the physical floor of a durable write: one 4 KiB write at
// offset 0 of a preallocated file, then an fdatasync (an fsync where there
// is none). BenchmarkSave runs one before each Save, in the same loop and
// on the same file system, and reports the Save as a multiple of it.
type RawSyncer struct {
	f   *os.File
	buf []byte
	i   byte
}

// RawSyncBytes is what one Sync writes.
const RawSyncBytes = 4096

// NewRawSyncer preallocates a 1 MiB file with real blocks in dir, so that
// the syncs overwrite and never allocate. It is closed when b ends.
func NewRawSyncer(b testing.TB, dir string) *RawSyncer {
	b.Helper()
	f, err := os.OpenFile(filepath.Join(dir, "raw-sync"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	if _, err := f.Write(bytes.Repeat([]byte{0xa5}, 1<<20)); err != nil {
		b.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	r := &RawSyncer{f: f, buf: bytes.Repeat([]byte{0x5a}, RawSyncBytes)}
	for range 20 { // warm up
		r.Sync(b)
	}
	return r
}

// Sync writes 4 KiB and makes them durable.
func (r *RawSyncer) Sync(b testing.TB) {
	r.i++
	r.buf[0] = r.i
	if _, err := r.f.WriteAt(r.buf, 0); err != nil {
		b.Fatal(err)
	}
	if err := datasync(r.f); err != nil {
		b.Fatal(err)
	}
}
