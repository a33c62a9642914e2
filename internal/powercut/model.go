//go:build linux

package powercut

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

// BlockSize is the unit in which pending file data reaches the disk, and
// SectorSize the unit in which the last block of a Tear is torn.
const (
	BlockSize  = 4096
	SectorSize = 512
)

// Mode says what a Cut keeps of the pending layer.
type Mode int

const (
	// Drop loses everything that was not made durable.
	Drop Mode = iota
	// Tear keeps a random part of the pending layer: data blocks and size
	// changes in a random order, cut after a random count with the last
	// block torn at a sector boundary; namespace operations as a random
	// subset, in the order they were made.
	Tear
)

func (m Mode) String() string {
	if m == Tear {
		return "tear"
	}
	return "drop"
}

// rootID is the model's identity of the mount's root directory.
const rootID = 1

// inode is one file or directory of the model. Its durable content is the
// file store/<id> (a file) or entries (a directory); pend is what was
// written since its last fsync.
type inode struct {
	id      uint64
	dir     bool
	perm    os.FileMode
	special uint32            // S_IFSOCK or S_IFIFO for those, else 0
	entries map[string]uint64 // a directory's durable entries
	pend    *pending          // a file's data written since its last fsync
}

// pending is a file's data and size written since its last fsync.
type pending struct {
	blocks  map[int64]*block // by block index: its content after the last write
	size    int64            // the live size
	minSize int64            // the smallest live size since the last fsync
	sized   bool             // the size changed since the last fsync
}

// block is the content of one BlockSize block after its last write (short
// at the end of the file); seq orders the writes.
type block struct {
	data []byte
	seq  uint64
}

// edit binds name in directory dir to target, or removes it (target 0).
type edit struct {
	dir    uint64
	name   string
	target uint64
}

// op is one namespace operation: a create or unlink is one edit, a rename
// two. Its edits leave it as their directories are fsynced.
type op struct{ edits []edit }

// model is the durable image and the pending layer. Every method is called
// with mu held by FS.
type model struct {
	store  string            // durable file contents: store/<id>
	nextID uint64            // the next inode id
	byIno  map[uint64]uint64 // live inode number → id
	nodes  map[uint64]*inode // by id
	ops    []*op             // namespace operations not durable yet, oldest first
	seq    uint64            // write counter
	rng    *rand.Rand
}

func newModel(store string, rng *rand.Rand) *model {
	m := &model{store: store, nextID: rootID + 1, byIno: map[uint64]uint64{}, nodes: map[uint64]*inode{}, rng: rng}
	m.nodes[rootID] = &inode{id: rootID, dir: true, perm: 0o755, entries: map[string]uint64{}}
	return m
}

func (m *model) storePath(id uint64) string {
	return filepath.Join(m.store, strconv.FormatUint(id, 10))
}

// id returns the id of the live inode st, making an orphan (a node no
// durable directory names) for one it has not seen.
func (m *model) id(st *syscall.Stat_t) uint64 {
	if id, ok := m.byIno[st.Ino]; ok {
		return id
	}
	return m.fresh(st)
}

// fresh makes a new orphan for the live inode st.
func (m *model) fresh(st *syscall.Stat_t) uint64 {
	n := &inode{id: m.nextID, dir: st.Mode&syscall.S_IFMT == syscall.S_IFDIR, perm: os.FileMode(st.Mode & 0o7777)}
	m.nextID++
	if n.dir {
		n.entries = map[string]uint64{}
	}
	if t := st.Mode & syscall.S_IFMT; t == syscall.S_IFSOCK || t == syscall.S_IFIFO {
		n.special = t
	}
	m.nodes[n.id] = n
	m.byIno[st.Ino] = n.id
	return n.id
}

// created records that name in dir is a new inode st.
func (m *model) created(dir uint64, name string, st *syscall.Stat_t) uint64 {
	id := m.fresh(st)
	m.ops = append(m.ops, &op{edits: []edit{{dir, name, id}}})
	return id
}

// linked records that name in dir is a new name of the inode st.
func (m *model) linked(dir uint64, name string, st *syscall.Stat_t) {
	m.ops = append(m.ops, &op{edits: []edit{{dir, name, m.id(st)}}})
}

// removed records that name in dir, the inode st, is gone.
func (m *model) removed(dir uint64, name string, st *syscall.Stat_t) {
	m.forget(st)
	m.ops = append(m.ops, &op{edits: []edit{{dir: dir, name: name}}})
}

// forget drops the live inode number of st when its last name goes, so
// that a new file given the same number is a new inode.
func (m *model) forget(st *syscall.Stat_t) {
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR || st.Nlink <= 1 {
		delete(m.byIno, st.Ino)
	}
}

// renamed records the rename of the inode src from name in dir to newName
// in newDir, replacing dst when it is not nil.
func (m *model) renamed(dir uint64, name string, newDir uint64, newName string, src, dst *syscall.Stat_t) {
	id := m.id(src)
	if dst != nil && dst.Ino != src.Ino {
		m.forget(dst)
	}
	m.ops = append(m.ops, &op{edits: []edit{{dir: dir, name: name}, {newDir, newName, id}}})
}

// pend returns the pending layer of file id, making it.
func (m *model) pend(id uint64) (*pending, error) {
	n := m.nodes[id]
	if n == nil || n.dir {
		return nil, fmt.Errorf("powercut: no file %d", id)
	}
	if n.pend == nil {
		size, err := m.durableSize(id)
		if err != nil {
			return nil, err
		}
		n.pend = &pending{blocks: map[int64]*block{}, size: size, minSize: size}
	}
	return n.pend, nil
}

func (m *model) durableSize(id uint64) (int64, error) {
	fi, err := os.Stat(m.storePath(id))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// wrote records a write of n bytes at off to file id, whose live
// descriptor is fd: it keeps the content of every block touched.
func (m *model) wrote(id uint64, fd int, off int64, n int) error {
	p, err := m.pend(id)
	if err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Size != p.size {
		p.size, p.sized = st.Size, true
	}
	if n <= 0 {
		return nil
	}
	for idx := off / BlockSize; idx <= (off+int64(n)-1)/BlockSize; idx++ {
		buf := make([]byte, BlockSize)
		k, err := syscall.Pread(fd, buf, idx*BlockSize)
		if err != nil {
			return err
		}
		m.seq++
		p.blocks[idx] = &block{data: buf[:k], seq: m.seq}
	}
	return nil
}

// truncated records that file id's live size is now size.
func (m *model) truncated(id uint64, size int64) error {
	p, err := m.pend(id)
	if err != nil {
		return err
	}
	p.size, p.sized = size, true
	p.minSize = min(p.minSize, size)
	for idx, b := range p.blocks {
		start := idx * BlockSize
		switch {
		case start >= size:
			delete(p.blocks, idx)
		case start+int64(len(b.data)) > size:
			b.data = b.data[:size-start]
		}
	}
	return nil
}

// syncFile makes everything pending of file id durable.
func (m *model) syncFile(id uint64) error {
	n := m.nodes[id]
	if n == nil || n.pend == nil {
		return nil
	}
	all := make([]int64, 0, len(n.pend.blocks))
	for idx := range n.pend.blocks {
		all = append(all, idx)
	}
	if err := m.flush(id, all, -1, 0, n.pend.sized); err != nil {
		return err
	}
	n.pend = nil
	return nil
}

// flush writes the blocks idx of file id's pending layer to its durable
// content, the block torn (when not -1) only up to its first sectors, and
// applies the size change when sized.
func (m *model) flush(id uint64, idx []int64, torn int64, sectors int, sized bool) error {
	p := m.nodes[id].pend
	f, err := os.OpenFile(m.storePath(id), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	limit := fi.Size()
	if sized {
		if p.minSize < limit {
			if err := f.Truncate(p.minSize); err != nil {
				return err
			}
		}
		limit = p.size
	}
	for _, i := range idx {
		data := p.blocks[i].data
		if i == torn {
			data = data[:min(len(data), sectors*SectorSize)]
		}
		start := i * BlockSize
		if start >= limit {
			continue
		}
		if start+int64(len(data)) > limit {
			data = data[:limit-start]
		}
		if _, err := f.WriteAt(data, start); err != nil {
			return err
		}
	}
	if sized {
		return f.Truncate(p.size)
	}
	return nil
}

// syncDir makes every pending edit of directory id durable.
func (m *model) syncDir(id uint64) {
	kept := m.ops[:0]
	for _, o := range m.ops {
		rest := o.edits[:0]
		for _, e := range o.edits {
			if e.dir == id {
				m.apply(e)
			} else {
				rest = append(rest, e)
			}
		}
		if len(rest) > 0 {
			o.edits = rest
			kept = append(kept, o)
		}
	}
	m.ops = kept
}

func (m *model) apply(e edit) {
	d := m.nodes[e.dir]
	if d == nil || !d.dir {
		return
	}
	if e.target == 0 {
		delete(d.entries, e.name)
	} else {
		d.entries[e.name] = e.target
	}
}

// CutStats says what a Cut did with the pending layer.
type CutStats struct {
	Mode         Mode
	Blocks       int // pending data blocks
	BlocksKept   int // of which reached the disk (the torn one included)
	TornSectors  int // sectors of the torn block that reached it (0: none torn)
	Sizes        int // pending size changes
	SizesKept    int
	Ops          int // pending namespace operations
	OpsKept      int
	FilesPending int // files with pending data
}

func (s CutStats) String() string {
	return fmt.Sprintf("%s: %d/%d blocks (torn %d sectors), %d/%d sizes, %d/%d namespace ops",
		s.Mode, s.BlocksKept, s.Blocks, s.TornSectors, s.SizesKept, s.Sizes, s.OpsKept, s.Ops)
}

// cut applies to the durable image what mode keeps of the pending layer,
// and empties it.
func (m *model) cut(mode Mode) (CutStats, error) {
	st := CutStats{Mode: mode}
	type item struct {
		id  uint64
		idx int64 // -1: the size change
	}
	var items []item
	ids := make([]uint64, 0, len(m.nodes))
	for id, n := range m.nodes {
		if n.pend != nil {
			ids = append(ids, id)
		}
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		p := m.nodes[id].pend
		st.FilesPending++
		idx := make([]int64, 0, len(p.blocks))
		for i := range p.blocks {
			idx = append(idx, i)
		}
		// Ordered before shuffling so that a seed replays the same cut.
		sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
		for _, i := range idx {
			items = append(items, item{id, i})
		}
		st.Blocks += len(idx)
		if p.sized {
			items = append(items, item{id, -1})
			st.Sizes++
		}
	}
	st.Ops = len(m.ops)
	if mode == Tear {
		m.rng.Shuffle(len(items), func(i, j int) { items[i], items[j] = items[j], items[i] })
		items = items[:m.rng.IntN(len(items)+1)]
		torn, sectors := item{idx: -1}, 0
		if k := len(items); k > 0 && items[k-1].idx >= 0 {
			torn = items[k-1]
			n := (len(m.nodes[torn.id].pend.blocks[torn.idx].data) + SectorSize - 1) / SectorSize
			if n > 1 {
				sectors = 1 + m.rng.IntN(n-1)
			} else {
				sectors = n
			}
			st.TornSectors = sectors
		}
		byFile := map[uint64][]int64{}
		sized := map[uint64]bool{}
		for _, it := range items {
			if it.idx < 0 {
				sized[it.id] = true
				st.SizesKept++
			} else {
				byFile[it.id] = append(byFile[it.id], it.idx)
				st.BlocksKept++
			}
		}
		for _, id := range ids {
			if len(byFile[id]) == 0 && !sized[id] {
				continue
			}
			t := int64(-1)
			if torn.id == id {
				t = torn.idx
			}
			if err := m.flush(id, byFile[id], t, sectors, sized[id]); err != nil {
				return st, err
			}
		}
		for _, o := range m.ops {
			if m.rng.IntN(2) == 0 {
				st.OpsKept++
				for _, e := range o.edits {
					m.apply(e)
				}
			}
		}
	}
	for _, id := range ids {
		m.nodes[id].pend = nil
	}
	m.ops = nil
	return st, nil
}

// materialize makes the live directory the durable image: it empties it,
// builds the tree again from the root, maps the new live inodes, and
// forgets (and deletes the content of) every inode no directory names.
func (m *model) materialize(live string) error {
	ents, err := os.ReadDir(live)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(live, e.Name())); err != nil {
			return err
		}
	}
	m.byIno = map[uint64]uint64{}
	var st syscall.Stat_t
	if err := syscall.Lstat(live, &st); err != nil {
		return err
	}
	m.byIno[st.Ino] = rootID
	seen := map[uint64]string{rootID: live}
	if err := m.build(rootID, live, seen); err != nil {
		return err
	}
	for id := range m.nodes {
		if _, ok := seen[id]; !ok {
			delete(m.nodes, id)
			if err := os.Remove(m.storePath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

func (m *model) build(dir uint64, path string, seen map[uint64]string) error {
	names := make([]string, 0, len(m.nodes[dir].entries))
	for name := range m.nodes[dir].entries {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		id := m.nodes[dir].entries[name]
		n := m.nodes[id]
		p := filepath.Join(path, name)
		if n == nil {
			delete(m.nodes[dir].entries, name)
			continue
		}
		if prev, ok := seen[id]; ok {
			if n.dir {
				// A directory named twice (a rename half made durable): the
				// first name wins, as fsck would decide.
				delete(m.nodes[dir].entries, name)
				continue
			}
			if err := os.Link(prev, p); err != nil {
				return err
			}
			continue
		}
		seen[id] = p
		if n.dir {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		} else if n.special != 0 {
			// A socket or a FIFO comes back as its inode, unbound.
			if err := syscall.Mknod(p, n.special|0o600, 0); err != nil {
				return err
			}
		} else if err := copyFile(m.storePath(id), p, n.perm); err != nil {
			return err
		}
		if err := os.Chmod(p, n.perm); err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		m.byIno[st.Ino] = id
		if n.dir {
			if err := m.build(id, p, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// copyFile copies the durable content src (missing: empty) to a new file dst.
func copyFile(src, dst string, perm os.FileMode) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm|0o600)
	if err != nil {
		return err
	}
	in, err := os.Open(src)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		out.Close()
		return err
	default:
		_, err = io.Copy(out, in)
		in.Close()
		if err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}
