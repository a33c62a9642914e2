//go:build linux

// Package slowdisk gives benchmarks a directory whose fsync and fdatasync
// take longer, as they do on an SD card or an eMMC chip: a FUSE filesystem
// that passes everything through to a directory of the machine's disk and,
// before it syncs a file or a directory there, waits a fixed delay.
//
// A development machine's disk syncs 4 KiB in about a tenth of a
// millisecond; an SD card takes one to ten. What group commit buys (many
// tasks made durable by one sync) shows only where the sync, not the
// processor, is what a task waits for: benchmarks run the appliance on a
// slow disk to measure that on a fast machine.
package slowdisk

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"

	"github.com/openstarry/openstarry-edge/internal/fusemount"
)

// Available returns nil when this process can mount the filesystem (root
// and /dev/fuse), else why not.
func Available() error {
	if err := fusemount.Available(); err != nil {
		return fmt.Errorf("slowdisk: %w", err)
	}
	return nil
}

// New mounts a slow disk over a new temporary directory of t, whose syncs
// wait delay before they sync, and returns its mount point; it is unmounted
// when t ends. Without root or /dev/fuse, t is skipped with the reason.
func New(t testing.TB, delay time.Duration) string {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	base := t.TempDir()
	under, mnt := filepath.Join(base, "under"), filepath.Join(base, "mnt")
	for _, d := range []string{under, mnt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(under, &st); err != nil {
		t.Fatal(err)
	}
	root := &fs.LoopbackRoot{Path: under, Dev: uint64(st.Dev)}
	rn := &node{LoopbackNode: &fs.LoopbackNode{RootData: root}, delay: delay}
	root.RootNode = rn
	server, err := fusemount.Mount(mnt, rn, "slowdisk")
	if err != nil {
		t.Fatalf("slowdisk: mount %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := fusemount.Unmount(server); err != nil {
			t.Errorf("slowdisk: unmount %s: %v", mnt, err)
		}
	})
	return mnt
}

// node is a loopback node whose syncs are slow.
type node struct {
	*fs.LoopbackNode
	delay time.Duration
}

var (
	_ fs.NodeWrapChilder = (*node)(nil)
	_ fs.NodeFsyncer     = (*node)(nil)
)

// WrapChild makes every node below the root a slow one too.
func (n *node) WrapChild(_ context.Context, ops fs.InodeEmbedder) fs.InodeEmbedder {
	return &node{LoopbackNode: ops.(*fs.LoopbackNode), delay: n.delay}
}

// Fsync waits the delay, then syncs the file through its handle (the
// kernel sends one with every fsync of a file; a directory's comes to its
// dirHandle).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	time.Sleep(n.delay)
	switch h := f.(type) {
	case fs.FileFsyncer:
		return h.Fsync(ctx, flags)
	case fs.FileFsyncdirer:
		return h.Fsyncdir(ctx, flags)
	}
	return syscall.ENOTSUP
}

// OpendirHandle opens the directory with a handle whose fsync is slow.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{Dir: fusemount.Dir{Inner: h}, delay: n.delay}, fl, 0
}

// dirHandle is an open directory: the loopback's stream, with a slow fsync.
type dirHandle struct {
	fusemount.Dir
	delay time.Duration
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	time.Sleep(d.delay)
	return d.Inner.(fs.FileFsyncdirer).Fsyncdir(ctx, flags)
}
