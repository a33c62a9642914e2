//go:build linux

package powercut

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/openstarry/openstarry-edge/internal/fusemount"
)

// FS is one mounted power-cut simulator. Its methods are safe for
// concurrent use; Cut must not overlap another Cut.
type FS struct {
	live  string // what programs see, through the mount
	store string // the durable contents of files, by inode id
	mnt   string // the mount point

	mu        sync.Mutex // guards m and the counters; held across each change of live that the model records
	m         *model
	server    *fuse.Server
	fileSyncs int
	dirSyncs  int
	cuts      int
}

// Available returns nil when this process can mount the simulator (root
// and /dev/fuse), else why not.
func Available() error {
	if err := fusemount.Available(); err != nil {
		return fmt.Errorf("powercut: %w", err)
	}
	return nil
}

// New mounts a new, empty simulator in a temporary directory of t and
// unmounts it when t ends. seed drives the choices of a Tear. Without root
// or /dev/fuse, the test is skipped with the reason.
func New(t testing.TB, seed uint64) *FS {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	f := &FS{
		live:  filepath.Join(base, "live"),
		store: filepath.Join(base, "store"),
		mnt:   filepath.Join(base, "mnt"),
	}
	for _, d := range []string{f.live, f.store, f.mnt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	f.m = newModel(f.store, rand.New(rand.NewPCG(seed, 0x706f776572)))
	var st syscall.Stat_t
	if err := syscall.Lstat(f.live, &st); err != nil {
		t.Fatal(err)
	}
	f.m.byIno[st.Ino] = rootID
	if err := f.mount(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.unmount(); err != nil {
			t.Errorf("powercut: %v", err)
		}
	})
	return f
}

// Dir returns the mount point.
func (f *FS) Dir() string { return f.mnt }

func (f *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(f.live, &st); err != nil {
		return err
	}
	root := &fs.LoopbackRoot{Path: f.live, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, pc: f}
	}
	rn := &node{LoopbackNode: fs.LoopbackNode{RootData: root}, pc: f}
	root.RootNode = rn
	server, err := fusemount.Mount(f.mnt, rn, "powercut")
	if err != nil {
		return fmt.Errorf("powercut: mount %s: %w", f.mnt, err)
	}
	f.server = server
	return nil
}

// unmount detaches the mount, waiting up to 10 s for the kernel to let go
// of files that killed processes held open.
func (f *FS) unmount() error {
	if f.server == nil {
		return nil
	}
	if err := fusemount.Unmount(f.server); err != nil {
		return fmt.Errorf("unmount %s: %w", f.mnt, err)
	}
	f.server = nil
	return nil
}

// Cut simulates a power cut: it unmounts (every process using the mount
// must be dead already), makes the durable image what mode keeps of the
// pending layer, rebuilds the live directory from it, and mounts again.
func (f *FS) Cut(mode Mode) (CutStats, error) {
	if err := f.unmount(); err != nil {
		return CutStats{}, err
	}
	f.mu.Lock()
	st, err := f.m.cut(mode)
	if err == nil {
		err = f.m.materialize(f.live)
	}
	f.cuts++
	f.mu.Unlock()
	if err != nil {
		return st, fmt.Errorf("powercut: cut: %w", err)
	}
	return st, f.mount()
}

// Stats counts the fsyncs of files and of directories the simulator has
// seen, and the cuts.
type Stats struct{ FileSyncs, DirSyncs, Cuts int }

// Stats returns the counters so far.
func (f *FS) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{f.fileSyncs, f.dirSyncs, f.cuts}
}

// WriteFile writes data to path (created, or truncated), fsyncing the file
// when sync is set: through the mount, the write is pending in the model
// until it is synced. It fails t on any error.
func WriteFile(t testing.TB, path string, data []byte, sync bool) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
