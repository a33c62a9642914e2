package bbolt

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/logbuf"

	"github.com/openstarry/openstarry-edge/internal/slowdisk"
)

// needSlowDisk fails t in CI (CI=true, where .ci/run installs fuse3) when
// the slow disk cannot be mounted; elsewhere slowdisk.New skips it.
func needSlowDisk(t *testing.T) {
	t.Helper()
	if err := slowdisk.Available(); err != nil && os.Getenv("CI") == "true" {
		t.Fatalf("CI: %v", err)
	}
}

// threadInSyscall reports whether a thread of this process is blocked in
// system call nr (from /proc/self/task/*/syscall, whose first field is
// the number of the call a blocked thread is in).
func threadInSyscall(t *testing.T, nr uintptr) bool {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/syscall")
	if err != nil || len(files) == 0 {
		t.Skipf("no /proc/self/task/*/syscall: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended, or is running
		}
		if fields := strings.Fields(string(b)); len(fields) > 0 && fields[0] == strconv.FormatUint(uint64(nr), 10) {
			return true
		}
	}
	return false
}

// A journal sync waits in the poller, not on a thread in fdatasync: while
// a sync that takes 400 ms (a slow disk, FUSE) is in flight, no thread of
// the process is in fdatasync, and the data is on the disk below once it
// returns. With fdatasync called directly, a thread is in the call for
// the whole 400 ms.
func TestAIOSyncWaitsInThePoller(t *testing.T) {
	needSlowDisk(t)
	dir := slowdisk.New(t, 400*time.Millisecond)
	f, err := os.OpenFile(filepath.Join(dir, "journal"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	data := bytes.Repeat([]byte("journal record "), 300)
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	s := &aioSyncer{}
	done := make(chan error, 1)
	go func() { done <- s.sync(int(f.Fd())) }()
	seen := false
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		seen = seen || threadInSyscall(t, unix.SYS_FDATASYNC)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.failed {
		t.Fatal("AIO fsync was refused on this kernel: the sync fell back to fdatasync")
	}
	if seen {
		t.Error("a thread was in fdatasync while the sync was in flight")
	}
	// Again, with the same context and eventfd.
	if err := s.sync(int(f.Fd())); err != nil || s.failed {
		t.Fatalf("second sync: %v (fell back: %v)", err, s.failed)
	}
}

// Where the kernel has no AIO fsync for a file (a pipe has no fsync at
// all), the syncer falls back to fdatasync, which answers as it would.
func TestAIOSyncFallsBack(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	s := &aioSyncer{}
	if err := s.sync(int(w.Fd())); err != unix.EINVAL {
		t.Errorf("sync of a pipe: %v, want EINVAL (fdatasync's answer)", err)
	}
	if !s.failed {
		t.Error("the syncer did not fall back")
	}
	f, err := os.CreateTemp(t.TempDir(), "j")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.sync(int(f.Fd())); err != nil {
		t.Errorf("fdatasync after the fallback: %v", err)
	}
}

// BenchmarkDatasync: one 4 KiB write and its sync, through Linux AIO
// (aioSyncer, what the journal uses) and by a plain fdatasync, on the file
// system of the current directory.
//
// Run: go test -run '^$' -bench Datasync -benchtime 2000x ./storage/bbolt/
func BenchmarkDatasync(b *testing.B) {
	page := bytes.Repeat([]byte{0xa5}, 4096)
	for _, tc := range []struct {
		name string
		sync func(fd int) error
	}{
		{"aio", (&aioSyncer{}).sync},
		{"fdatasync", unix.Fdatasync},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f, err := os.CreateTemp(".", "datasync-bench-")
			if err != nil {
				b.Fatal(err)
			}
			defer os.Remove(f.Name())
			defer f.Close()
			fd := int(f.Fd())
			for b.Loop() {
				if _, err := f.WriteAt(page, 0); err != nil {
					b.Fatal(err)
				}
				if err := tc.sync(fd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A journal's save in a busy spell (agent.BusySave) waits for its sync in
// the poller: no thread is in fdatasync meanwhile; out of one it calls
// fdatasync. On a slow disk (FUSE), each sync takes 200 ms.
func TestJournalSyncPolledWhenBusy(t *testing.T) {
	needSlowDisk(t)
	s := mustOpen(t, slowdisk.New(t, 200*time.Millisecond), Options{})
	w := newWindow("busy", 10, 200)
	mustSave(t, s, w.snap) // the first save commits to bbolt; the next ones go to the journal
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		inCall bool
	}{
		{"busy", agent.WithBusySave(context.Background()), false},
		{"one at a time", context.Background(), true},
	} {
		snap := w.step()
		done := make(chan error, 1)
		go func() { done <- s.Save(tc.ctx, snap) }()
		seen := false
		for deadline := time.Now().Add(150 * time.Millisecond); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			seen = seen || threadInSyscall(t, unix.SYS_FDATASYNC)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if seen != tc.inCall {
			t.Errorf("%s: a thread in fdatasync during the save: %v, want %v", tc.name, seen, tc.inCall)
		}
		checkLoad(t, s, snap)
	}
}

// When the kernel refused AIO fsync, the store says so once, at the first
// busy save, and saves on with fdatasync.
func TestAIORefusedLogged(t *testing.T) {
	syncer.mu.Lock()
	was := syncer.failed
	syncer.failed = true
	syncer.mu.Unlock()
	t.Cleanup(func() { syncer.mu.Lock(); syncer.failed = was; syncer.mu.Unlock() })
	var logs logbuf.Buffer
	s, err := Open(t.TempDir(), Options{Logger: zerolog.New(&logs)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newWindow("refused", 10, 200)
	mustSave(t, s, w.snap)
	busy := agent.WithBusySave(context.Background())
	for range 3 {
		snap := w.step()
		if err := s.Save(busy, snap); err != nil {
			t.Fatal(err)
		}
		checkLoad(t, s, snap)
	}
	if n := strings.Count(logs.String(), "refused AIO fsync"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
	}
}
