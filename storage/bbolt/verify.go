package bbolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// This file checks an agent's file by reading it with plain reads, before
// bbolt maps it. bbolt trusts its file: a page id past the end of a
// truncated file makes it fault on the mapping (SIGBUS, which a Go program
// cannot recover from), and a damaged page makes it fail an assertion in a
// goroutine of its own (at open, NoFreelistSync rebuilds the freelist by
// walking every page in one), which no recover can catch. So every page
// bbolt can reach from the meta page it will use is checked here first:
// inside the file and below the high water mark, of the type its parent
// expects, with every element inside its page, keys in order, and no page
// reached twice. A file that passes cannot make bbolt read outside the
// file, and bbolt's own consistency check (tx.Check) then runs safely.
//
// The layout is bbolt's file format version 2 (go.etcd.io/bbolt
// internal/common): native-endian integers, a 16-byte page header (id,
// flags, count, overflow), 16-byte branch elements (pos, ksize, pgid) and
// leaf elements (flags, pos, ksize, vsize), whose pos is relative to the
// element itself, and bucket values that start with a 16-byte header (root
// page, sequence), followed by the inline page when root is 0. The meta
// page after its header: magic, version, page size, flags (4 bytes each),
// root bucket (16), freelist page, high water mark, txid, then the FNV-1a
// 64 of those 56 bytes. TestBoltFormatPin (format_pin_test.go) pins it: it
// fails, saying what to do, when go.mod's bbolt changes or a file the real
// bbolt writes stops reading as this says.

const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	elemSize       = 16 // branch and leaf elements alike
	metaLen        = 56 // the bytes of a meta page its checksum covers
	bucketHeader   = 16
	noFreelist     = ^uint64(0)

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagFreelist = 0x10
	bucketFlag   = 0x01

	// maxDepth bounds the nesting of pages and buckets the check follows;
	// a tree of 4 KiB pages is far shallower than this for any file that
	// fits a disk.
	maxDepth = 64
)

var ne = binary.NativeEndian

// bmeta is one of the two meta pages, as bbolt would read it.
type bmeta struct {
	pageSize             uint32
	root, freelist, pgid uint64
	txid                 uint64
	err                  error // why bbolt's validation refuses it; nil when it passes
}

// parseMeta reads the meta in the page p (its header included).
func parseMeta(p []byte) bmeta {
	if len(p) < pageHeaderSize+metaLen+8 {
		return bmeta{err: errors.New("cut short")}
	}
	m := p[pageHeaderSize:]
	b := bmeta{
		pageSize: ne.Uint32(m[8:]),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		pgid:     ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}
	h := fnv.New64a()
	h.Write(m[:metaLen])
	switch {
	case ne.Uint32(m[0:]) != boltMagic:
		b.err = errors.New("not a bbolt meta page (magic)")
	case ne.Uint32(m[4:]) != boltVersion:
		b.err = fmt.Errorf("bbolt format version %d, want %d", ne.Uint32(m[4:]), boltVersion)
	case ne.Uint64(m[metaLen:]) != h.Sum64():
		b.err = errors.New("checksum mismatch")
	case b.pageSize < 512 || b.pageSize > 1<<24 || b.pageSize&(b.pageSize-1) != 0:
		b.err = fmt.Errorf("page size %d", b.pageSize)
	}
	return b
}

// fileCheck is what checkFile learnt of a file that passed.
type fileCheck struct {
	pageSize int
	txid     uint64 // of the meta page bbolt will use
	pages    int    // pages reachable from it
	// metaErr names the meta page that failed its checksum, when one did;
	// bbolt then uses the other, which may be the commit before the newest.
	metaErr error
}

// checkFile checks the bbolt file at path as described above. An error
// means bbolt must not open the file; it names what is wrong.
func checkFile(path string) (*fileCheck, error) { return checkFileValues(path, nil) }

// checkFileValues is checkFile that also hands every value of the file (a
// leaf element that is not a bucket) to frame, with the page it lies in;
// frame nil: none. The scrub checks each value's frame with it.
func checkFileValues(path string, frame func(where fmt.Stringer, k, v []byte)) (*fileCheck, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	size := fi.Size()
	if size == 0 {
		return nil, errors.New("the file is empty")
	}
	first := make([]byte, min(size, 4096))
	if _, err := f.ReadAt(first, 0); err != nil {
		return nil, err
	}
	m0 := parseMeta(first)
	var m1 bmeta
	if m0.err == nil {
		m1 = readMeta(f, int64(m0.pageSize), size)
	} else {
		// bbolt's search for the second meta page when the first is bad:
		// every page size from 1 KiB up.
		m1 = bmeta{err: errors.New("not found")}
		for i := 0; i <= 14; i++ {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			if m := readMeta(f, pos, size); m.err == nil && int64(m.pageSize) == pos {
				m1 = m
				break
			}
		}
	}
	if m0.err != nil && m1.err != nil {
		return nil, fmt.Errorf("both meta pages are damaged (page 0: %v; page 1: %v)", m0.err, m1.err)
	}
	c := &fileCheck{}
	// bbolt's choice (DB.meta): the higher txid if it validates, else the
	// other.
	use := m0
	if m0.err != nil || m1.err == nil && m1.txid > m0.txid {
		use = m1
	}
	switch {
	case m0.err != nil:
		c.metaErr = fmt.Errorf("meta page 0 is damaged (%v)", m0.err)
	case m1.err != nil:
		c.metaErr = fmt.Errorf("meta page 1 is damaged (%v)", m1.err)
	case m0.pageSize != m1.pageSize:
		return nil, fmt.Errorf("the meta pages disagree on the page size (%d, %d)", m0.pageSize, m1.pageSize)
	}
	c.pageSize, c.txid = int(use.pageSize), use.txid
	ps := uint64(use.pageSize)
	switch {
	case use.pgid < 4 || use.pgid > uint64(size)/ps:
		return nil, fmt.Errorf("the file is %d bytes but its meta page (txid %d) says it holds %d pages of %d bytes: it was cut short",
			size, use.txid, use.pgid, ps)
	case use.root < 2 || use.root >= use.pgid:
		return nil, fmt.Errorf("the root page %d is outside the file's %d pages", use.root, use.pgid)
	case use.freelist != noFreelist && (use.freelist < 2 || use.freelist >= use.pgid):
		return nil, fmt.Errorf("the freelist page %d is outside the file's %d pages", use.freelist, use.pgid)
	}
	w := &walker{f: f, ps: int(ps), hwm: use.pgid, seen: map[uint64]bool{}, frame: frame}
	if used := use.pgid * ps; used <= wholeRead {
		// One read instead of one a page: the check is bound by system
		// calls, not by the bytes.
		w.all = make([]byte, used)
		if _, err := f.ReadAt(w.all, 0); err != nil {
			return nil, err
		}
	}
	if use.freelist != noFreelist {
		if err := w.freelist(use.freelist); err != nil {
			return nil, err
		}
	}
	if err := w.tree(use.root, nil, nil, 0); err != nil {
		return nil, err
	}
	c.pages = len(w.seen)
	return c, nil
}

func readMeta(f *os.File, off, size int64) bmeta {
	if off+pageHeaderSize+metaLen+8 > size {
		return bmeta{err: errors.New("past the end of the file")}
	}
	buf := make([]byte, pageHeaderSize+metaLen+8)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return bmeta{err: err}
	}
	return parseMeta(buf)
}

// wholeRead is the largest file checkFile reads in one go; a larger one is
// read a page at a time, so that the check's memory stays bounded.
const wholeRead = 16 << 20

// walker reads the pages of one file, each at most once.
type walker struct {
	f    *os.File
	all  []byte // the pages in use, when the file is read whole
	ps   int
	hwm  uint64 // pages in use: every page id is below it
	seen map[uint64]bool
	// frame, when set, is given every value that is not a bucket.
	frame func(where fmt.Stringer, k, v []byte)
}

// read returns n bytes of the file from off.
func (w *walker) read(off int64, n int) ([]byte, error) {
	if w.all != nil {
		return w.all[off : off+int64(n)], nil // inside: page checks hwm first
	}
	b := make([]byte, n)
	_, err := w.f.ReadAt(b, off)
	return b, err
}

// page reads page id with its overflow pages, after checking that it lies
// inside the file and was not reached before.
func (w *walker) page(id uint64, parent string) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("%s points at page %d, outside the file's %d pages", parent, id, w.hwm)
	}
	p, err := w.read(int64(id)*int64(w.ps), w.ps)
	if err != nil {
		return nil, fmt.Errorf("page %d: %w", id, err)
	}
	if got := ne.Uint64(p); got != id {
		return nil, fmt.Errorf("page %d says it is page %d", id, got)
	}
	over := uint64(ne.Uint32(p[12:]))
	if over >= w.hwm-id {
		return nil, fmt.Errorf("page %d runs %d pages past the file's %d", id, over, w.hwm)
	}
	for i := id; i <= id+over; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d is reached twice (from %s)", i, parent)
		}
		w.seen[i] = true
	}
	if over > 0 {
		if p, err = w.read(int64(id)*int64(w.ps), int(over+1)*w.ps); err != nil {
			return nil, fmt.Errorf("page %d: %w", id, err)
		}
	}
	return p, nil
}

func (w *walker) freelist(id uint64) error {
	p, err := w.page(id, "the meta page's freelist")
	if err != nil {
		return err
	}
	if flags := ne.Uint16(p[8:]); flags != flagFreelist {
		return fmt.Errorf("freelist page %d has flags %#x", id, flags)
	}
	n, off := uint64(ne.Uint16(p[10:])), uint64(pageHeaderSize)
	if n == 0xFFFF { // the count is in the first element
		if len(p) < pageHeaderSize+8 {
			return fmt.Errorf("freelist page %d is cut short", id)
		}
		n, off = ne.Uint64(p[pageHeaderSize:]), off+8
	}
	if n > (uint64(len(p))-off)/8 {
		return fmt.Errorf("freelist page %d claims %d ids, more than it holds", id, n)
	}
	for i := uint64(0); i < n; i++ {
		if free := ne.Uint64(p[off+i*8:]); free < 2 || free >= w.hwm {
			return fmt.Errorf("freelist page %d lists page %d, outside the file's %d pages", id, free, w.hwm)
		}
	}
	return nil
}

// tree checks the page id and everything under it; every key in it must be
// at least lo and below hi (nil: unbounded).
func (w *walker) tree(id uint64, lo, hi []byte, depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("page %d is nested deeper than %d", id, maxDepth)
	}
	p, err := w.page(id, "its parent")
	if err != nil {
		return err
	}
	return w.node(p, pageName(id), lo, hi, depth)
}

// pageName names a page in an error; only formatted when one is reported.
type pageName uint64

func (p pageName) String() string { return fmt.Sprintf("page %d", uint64(p)) }

// node checks one branch or leaf page p, named name, and what it points to.
func (w *walker) node(p []byte, name fmt.Stringer, lo, hi []byte, depth int) error {
	if len(p) < pageHeaderSize {
		return fmt.Errorf("%s is cut short", name)
	}
	flags, count := ne.Uint16(p[8:]), uint64(ne.Uint16(p[10:]))
	if pageHeaderSize+count*elemSize > uint64(len(p)) {
		return fmt.Errorf("%s claims %d elements, more than it holds", name, count)
	}
	keys := make([][]byte, 0, count)
	var children [][]byte
	var kids []uint64
	for i := uint64(0); i < count; i++ {
		off := pageHeaderSize + i*elemSize
		e := p[off : off+elemSize]
		var pos, ksize, vsize uint64
		switch flags {
		case flagBranch:
			pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
			kids = append(kids, ne.Uint64(e[8:]))
		case flagLeaf:
			if ef := ne.Uint32(e[0:]); ef&^bucketFlag != 0 {
				return fmt.Errorf("%s element %d has flags %#x", name, i, ef)
			}
			pos, ksize, vsize = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
		default:
			return fmt.Errorf("%s is neither a branch nor a leaf (flags %#x)", name, flags)
		}
		start := off + pos
		if pos < elemSize*(count-i) || start+ksize+vsize > uint64(len(p)) {
			return fmt.Errorf("%s element %d points outside its page", name, i)
		}
		k := p[start : start+ksize]
		if i > 0 && bytes.Compare(keys[i-1], k) >= 0 || lo != nil && bytes.Compare(k, lo) < 0 || hi != nil && bytes.Compare(k, hi) >= 0 {
			return fmt.Errorf("%s element %d: keys out of order", name, i)
		}
		keys = append(keys, k)
		if flags == flagLeaf && ne.Uint32(e[0:])&bucketFlag != 0 {
			children = append(children, p[start+ksize:start+ksize+vsize])
		} else if flags == flagLeaf && w.frame != nil {
			w.frame(name, k, p[start+ksize:start+ksize+vsize])
		}
	}
	if flags == flagBranch {
		if count == 0 {
			return fmt.Errorf("%s is an empty branch", name)
		}
		for i, kid := range kids {
			var next []byte = hi
			if i+1 < len(keys) {
				next = keys[i+1]
			}
			if err := w.tree(kid, keys[i], next, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for _, v := range children {
		if err := w.bucket(v, name, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// bucket checks a bucket whose value v is found in the page named parent.
func (w *walker) bucket(v []byte, parent fmt.Stringer, depth int) error {
	if len(v) < bucketHeader {
		return fmt.Errorf("%s holds a bucket value of %d bytes", parent, len(v))
	}
	if root := ne.Uint64(v); root != 0 {
		return w.tree(root, nil, nil, depth)
	}
	inline := v[bucketHeader:]
	if len(inline) < pageHeaderSize || ne.Uint16(inline[8:]) != flagLeaf {
		return fmt.Errorf("%s holds an inline bucket that is not a leaf", parent)
	}
	if depth > maxDepth {
		return fmt.Errorf("%s: buckets nested deeper than %d", parent, maxDepth)
	}
	return w.node(inline, inlineName{parent}, nil, nil, depth)
}

type inlineName struct{ parent fmt.Stringer }

func (n inlineName) String() string { return "an inline bucket in " + n.parent.String() }
