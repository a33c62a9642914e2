//go:build linux

// Package fusemount is what the tests' FUSE filesystems (internal/powercut,
// internal/slowdisk) share: whether this process can mount one, mounting a
// loopback root with the same options, unmounting once killed processes let
// go, and the directory handle that passes a listing through.
package fusemount

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// Available returns nil when this process can mount a FUSE filesystem with
// mount(2) (root and /dev/fuse), else why not.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("mounting FUSE with mount(2) needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("no FUSE in this kernel: %w", err)
	}
	return nil
}

// Mount mounts root at dir under name, with attributes and entries cached
// for a second.
func Mount(dir string, root fs.InodeEmbedder, name string) (*fuse.Server, error) {
	sec := time.Second
	return fs.Mount(dir, root, &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{DirectMountStrict: true, FsName: name, Name: name},
	})
}

// Unmount detaches server's mount, waiting up to 10 s for the kernel to let
// go of files that killed processes held open.
func Unmount(server *fuse.Server) error {
	return wait.Poll(10*time.Second, server.Unmount)
}

// Dir is an open directory whose listing is the loopback's stream Inner;
// a filesystem embeds it and adds its own Fsyncdir.
type Dir struct{ Inner fs.FileHandle }

func (d *Dir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.Inner.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *Dir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.Inner.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *Dir) Releasedir(ctx context.Context, flags uint32) {
	d.Inner.(fs.FileReleasedirer).Releasedir(ctx, flags)
}
