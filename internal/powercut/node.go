//go:build linux

package powercut

import (
	"context"
	"path/filepath"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/openstarry/openstarry-edge/internal/fusemount"
)

// node is a loopback node whose changes the model records. Reads of
// directories, attributes and extended attributes are the loopback's;
// lookups are the loopback's but for the node's generation (see newChild).
type node struct {
	fs.LoopbackNode
	pc *FS
}

// live returns the node's path in the live directory.
func (n *node) live() string { return filepath.Join(n.pc.live, n.Path(nil)) }

func lstat(p string) (*syscall.Stat_t, syscall.Errno) {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		return nil, fs.ToErrno(err)
	}
	return &st, 0
}

// self returns the model id of the node, a directory.
func (n *node) self() (uint64, syscall.Errno) {
	st, errno := lstat(n.live())
	if errno != 0 {
		return 0, errno
	}
	return n.pc.m.id(st), 0
}

// newChild returns the FUSE node of the live inode st, called with mu
// held. Its generation is the model's id of the file, so that a new file
// to which the live filesystem gives the number of a removed one (ext4
// does at once) is a new node: with the loopback's constant generation it
// shared the key of the removed file's node, and the kernel's late FORGET
// of that node dropped the new file's key too, so that the next lookup of
// the new file made a third node. A Unix socket bound on the first node
// then refused every connection made through the third.
func (n *node) newChild(ctx context.Context, st *syscall.Stat_t) *fs.Inode {
	gen := uint64(1) // a live inode the model has not seen
	if id, ok := n.pc.m.byIno[st.Ino]; ok {
		gen = id
	}
	child := &node{LoopbackNode: fs.LoopbackNode{RootData: n.RootData}, pc: n.pc}
	return n.NewInode(ctx, child, fs.StableAttr{Mode: st.Mode, Ino: st.Ino, Gen: gen})
}

// Lookup is the loopback's, with the generation of newChild.
func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	st, errno := lstat(filepath.Join(n.live(), name))
	if errno != 0 {
		return nil, errno
	}
	out.Attr.FromStat(st)
	return n.newChild(ctx, st), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	dir, errno := n.self()
	if errno != 0 {
		return nil, nil, 0, errno
	}
	p := filepath.Join(n.live(), name)
	_, existed := lstat(p)
	fd, err := syscall.Open(p, rdwr(flags)|syscall.O_CREAT, mode)
	if err != nil {
		return nil, nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, nil, 0, fs.ToErrno(err)
	}
	var id uint64
	if existed != 0 {
		id = n.pc.m.created(dir, name, &st)
	} else {
		id = n.pc.m.id(&st)
		if flags&syscall.O_TRUNC != 0 {
			if err := n.pc.m.truncated(id, 0); err != nil {
				syscall.Close(fd)
				return nil, nil, 0, fs.ToErrno(err)
			}
		}
	}
	out.FromStat(&st)
	return n.newChild(ctx, &st), n.pc.newFile(fd, id), 0, 0
}

// rdwr returns open flags for the live file: read-write whatever was
// asked (the model reads back every block written), never O_APPEND (the
// kernel gives the offset of an append).
func rdwr(flags uint32) int {
	return int(flags&^uint32(syscall.O_APPEND|syscall.O_ACCMODE)) | syscall.O_RDWR
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fd, err := syscall.Open(n.live(), rdwr(flags&^fuse.FMODE_EXEC), 0)
	if err != nil {
		return nil, 0, fs.ToErrno(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return nil, 0, fs.ToErrno(err)
	}
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	id := n.pc.m.id(&st)
	if flags&syscall.O_TRUNC != 0 {
		if err := n.pc.m.truncated(id, 0); err != nil {
			syscall.Close(fd)
			return nil, 0, fs.ToErrno(err)
		}
	}
	return n.pc.newFile(fd, id), 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, out, func(p string) error { return syscall.Mkdir(p, mode) })
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if t := mode & syscall.S_IFMT; t == syscall.S_IFBLK || t == syscall.S_IFCHR {
		return nil, syscall.EPERM // device nodes are not modelled
	}
	return n.make(ctx, name, out, func(p string) error { return syscall.Mknod(p, mode, int(rdev)) })
}

// make creates name in the node with mk and records it.
func (n *node) make(ctx context.Context, name string, out *fuse.EntryOut, mk func(string) error) (*fs.Inode, syscall.Errno) {
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	dir, errno := n.self()
	if errno != 0 {
		return nil, errno
	}
	p := filepath.Join(n.live(), name)
	if err := mk(p); err != nil {
		return nil, fs.ToErrno(err)
	}
	st, errno := lstat(p)
	if errno != 0 {
		return nil, errno
	}
	n.pc.m.created(dir, name, st)
	out.Attr.FromStat(st)
	return n.newChild(ctx, st), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM // not modelled
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	dir, errno := n.self()
	if errno != 0 {
		return nil, errno
	}
	p := filepath.Join(n.live(), name)
	if err := syscall.Link(filepath.Join(n.pc.live, target.EmbeddedInode().Path(nil)), p); err != nil {
		return nil, fs.ToErrno(err)
	}
	st, errno := lstat(p)
	if errno != 0 {
		return nil, errno
	}
	n.pc.m.linked(dir, name, st)
	out.Attr.FromStat(st)
	return n.newChild(ctx, st), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, syscall.Unlink)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, syscall.Rmdir)
}

func (n *node) remove(name string, rm func(string) error) syscall.Errno {
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	dir, errno := n.self()
	if errno != 0 {
		return errno
	}
	p := filepath.Join(n.live(), name)
	st, errno := lstat(p)
	if errno != 0 {
		return errno
	}
	if err := rm(p); err != nil {
		return fs.ToErrno(err)
	}
	n.pc.m.removed(dir, name, st)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&^uint32(1) != 0 { // RENAME_NOREPLACE only; RENAME_EXCHANGE is not modelled
		return syscall.EINVAL
	}
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	dir, errno := n.self()
	if errno != 0 {
		return errno
	}
	newDir, errno := np.self()
	if errno != 0 {
		return errno
	}
	p1, p2 := filepath.Join(n.live(), name), filepath.Join(np.live(), newName)
	src, errno := lstat(p1)
	if errno != 0 {
		return errno
	}
	dst, _ := lstat(p2)
	if flags != 0 && dst != nil {
		return syscall.EEXIST
	}
	if err := syscall.Rename(p1, p2); err != nil {
		return fs.ToErrno(err)
	}
	n.pc.m.renamed(dir, name, newDir, newName, src, dst)
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var inner fs.FileHandle
	var id uint64
	lf, _ := f.(*file)
	if lf != nil {
		inner, id = lf.inner, lf.id
	}
	sz, sized := in.GetSize()
	if !sized {
		return n.LoopbackNode.Setattr(ctx, inner, in, out)
	}
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	if lf == nil {
		st, errno := lstat(n.live())
		if errno != 0 {
			return errno
		}
		id = n.pc.m.id(st)
	}
	if errno := n.LoopbackNode.Setattr(ctx, inner, in, out); errno != 0 {
		return errno
	}
	if err := n.pc.m.truncated(id, int64(sz)); err != nil {
		return fs.ToErrno(err)
	}
	return 0
}

// CopyFileRange answers ENOSYS, so that the kernel copies with reads and
// writes, which the model sees.
func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.ENOSYS
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &dirHandle{Dir: fusemount.Dir{Inner: h}, n: n}, fl, 0
}

// Fsync of a node without a handle (the kernel sends a handle for files
// and directories alike; this is the fallback).
func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	switch h := f.(type) {
	case *file:
		return h.Fsync(ctx, flags)
	case *dirHandle:
		return h.Fsyncdir(ctx, flags)
	}
	if n.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
		n.pc.mu.Lock()
		defer n.pc.mu.Unlock()
		st, errno := lstat(n.live())
		if errno != 0 {
			return errno
		}
		return fs.ToErrno(n.pc.m.syncFile(n.pc.m.id(st)))
	}
	return n.fsyncDir()
}

func (n *node) fsyncDir() syscall.Errno {
	n.pc.mu.Lock()
	defer n.pc.mu.Unlock()
	id, errno := n.self()
	if errno != 0 {
		return errno
	}
	n.pc.m.syncDir(id)
	n.pc.dirSyncs++
	return 0
}

// dirHandle is an open directory: the loopback's stream, with fsync going
// to the model.
type dirHandle struct {
	fusemount.Dir
	n *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno { return d.n.fsyncDir() }

// file is an open file: reads go to the live file; writes, truncations
// and fsyncs are recorded in the model.
type file struct {
	inner fs.FileHandle // the loopback's handle of fd
	fd    int
	id    uint64
	pc    *FS
}

func (pc *FS) newFile(fd int, id uint64) *file {
	return &file{inner: fs.NewLoopbackFile(fd), fd: fd, id: id, pc: pc}
}

func (f *file) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return f.inner.(fs.FileReader).Read(ctx, buf, off)
}

func (f *file) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.pc.mu.Lock()
	defer f.pc.mu.Unlock()
	n, err := syscall.Pwrite(f.fd, data, off)
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	if err := f.pc.m.wrote(f.id, f.fd, off, n); err != nil {
		return 0, fs.ToErrno(err)
	}
	return uint32(n), 0
}

func (f *file) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.pc.mu.Lock()
	defer f.pc.mu.Unlock()
	if err := f.pc.m.syncFile(f.id); err != nil {
		return fs.ToErrno(err)
	}
	f.pc.fileSyncs++
	return 0
}

func (f *file) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	f.pc.mu.Lock()
	defer f.pc.mu.Unlock()
	if errno := f.inner.(fs.FileAllocater).Allocate(ctx, off, size, mode); errno != 0 {
		return errno
	}
	if err := f.pc.m.wrote(f.id, f.fd, int64(off), 0); err != nil {
		return fs.ToErrno(err)
	}
	return 0
}

func (f *file) Release(ctx context.Context) syscall.Errno {
	return f.inner.(fs.FileReleaser).Release(ctx)
}

func (f *file) Flush(ctx context.Context) syscall.Errno {
	return f.inner.(fs.FileFlusher).Flush(ctx)
}

func (f *file) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return f.inner.(fs.FileGetattrer).Getattr(ctx, out)
}

func (f *file) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return f.inner.(fs.FileLseeker).Lseek(ctx, off, whence)
}

var (
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.FileReader         = (*file)(nil)
	_ fs.FileWriter         = (*file)(nil)
	_ fs.FileFsyncer        = (*file)(nil)
	_ fs.FileAllocater      = (*file)(nil)
	_ fs.FileReleaser       = (*file)(nil)
	_ fs.FileFlusher        = (*file)(nil)
	_ fs.FileGetattrer      = (*file)(nil)
	_ fs.FileLseeker        = (*file)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
)
