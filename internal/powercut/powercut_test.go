//go:build linux

package powercut_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/openstarry/openstarry-edge/internal/powercut"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

func cut(t *testing.T, p *powercut.FS, mode powercut.Mode) powercut.CutStats {
	t.Helper()
	st, err := p.Cut(mode)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestCut holds the simulator to its promise, one case a row: what was
// made durable survives a Drop, and what was not is gone.
func TestCut(t *testing.T) {
	type want struct {
		file    string
		content string // "" with exists false: gone
		exists  bool
	}
	for _, tc := range []struct {
		name string
		do   func(t *testing.T, dir string)
		want []want
	}{
		{"unsynced write is lost", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("new!"), false)
		}, []want{{"a", "old", true}}},
		{"synced write survives", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("new!"), true)
		}, []want{{"a", "new!", true}}},
		{"synced file without directory fsync is lost", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("data"), true)
		}, []want{{"a", "", false}}},
		{"rename without directory fsync is lost", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			powercut.WriteFile(t, filepath.Join(dir, "a.tmp"), []byte("new"), true)
			if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
		}, []want{{"a", "old", true}, {"a.tmp", "", false}}},
		{"rename with directory fsync survives", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("old"), true)
			syncDir(t, dir)
			powercut.WriteFile(t, filepath.Join(dir, "a.tmp"), []byte("new"), true)
			if err := os.Rename(filepath.Join(dir, "a.tmp"), filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
			syncDir(t, dir)
		}, []want{{"a", "new", true}, {"a.tmp", "", false}}},
		{"unlink without directory fsync is undone", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("kept"), true)
			syncDir(t, dir)
			if err := os.Remove(filepath.Join(dir, "a")); err != nil {
				t.Fatal(err)
			}
		}, []want{{"a", "kept", true}}},
		{"truncate without fsync is undone", func(t *testing.T, dir string) {
			powercut.WriteFile(t, filepath.Join(dir, "a"), []byte("0123456789"), true)
			syncDir(t, dir)
			if err := os.Truncate(filepath.Join(dir, "a"), 3); err != nil {
				t.Fatal(err)
			}
		}, []want{{"a", "0123456789", true}}},
		{"new directory needs its parent fsynced", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
				t.Fatal(err)
			}
			powercut.WriteFile(t, filepath.Join(dir, "d", "a"), []byte("x"), true)
			syncDir(t, filepath.Join(dir, "d"))
		}, []want{{"d/a", "", false}}},
		{"new directory with every parent fsynced survives", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
				t.Fatal(err)
			}
			powercut.WriteFile(t, filepath.Join(dir, "d", "a"), []byte("x"), true)
			syncDir(t, filepath.Join(dir, "d"))
			syncDir(t, dir)
		}, []want{{"d/a", "x", true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := powercut.New(t, 1)
			tc.do(t, p.Dir())
			cut(t, p, powercut.Drop)
			for _, w := range tc.want {
				got, ok := readFile(t, filepath.Join(p.Dir(), w.file))
				if ok != w.exists || got != w.content {
					t.Errorf("%s after the cut: %q (exists %v), want %q (exists %v)", w.file, got, ok, w.content, w.exists)
				}
			}
		})
	}
}

// TestTear: a Tear keeps each unsynced block whole or not at all, except
// one torn at a sector boundary, and the same seed tears the same way.
func TestTear(t *testing.T) {
	const blocks = 6
	old := bytes.Repeat([]byte{'o'}, blocks*powercut.BlockSize)
	neu := bytes.Repeat([]byte{'n'}, blocks*powercut.BlockSize)
	run := func(seed uint64) (string, powercut.CutStats) {
		p := powercut.New(t, seed)
		path := filepath.Join(p.Dir(), "f")
		powercut.WriteFile(t, path, old, true)
		syncDir(t, p.Dir())
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(neu, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		st := cut(t, p, powercut.Tear)
		got, _ := readFile(t, path)
		return got, st
	}
	var torn, whole, none int
	for seed := uint64(1); seed <= 12; seed++ {
		got, st := run(seed)
		if len(got) != len(old) {
			t.Fatalf("seed %d: %d bytes, want %d", seed, len(got), len(old))
		}
		kept := 0
		for b := range blocks {
			blk := got[b*powercut.BlockSize : (b+1)*powercut.BlockSize]
			n := bytes.Count([]byte(blk), []byte{'n'})
			switch {
			case n == 0:
			case n == powercut.BlockSize:
				kept++
			case n%powercut.SectorSize == 0 && blk[:n] == string(neu[:n]):
				kept++
				torn++
			default:
				t.Fatalf("seed %d: block %d has %d new bytes, not a sector prefix", seed, b, n)
			}
		}
		if kept != st.BlocksKept {
			t.Errorf("seed %d: %d blocks on disk, the cut says %d (%v)", seed, kept, st.BlocksKept, st)
		}
		if kept == blocks && st.TornSectors == 0 {
			whole++
		}
		if kept == 0 {
			none++
		}
		if again, _ := run(seed); again != got {
			t.Fatalf("seed %d tore differently the second time", seed)
		}
	}
	if torn == 0 {
		t.Errorf("12 seeds and no torn block")
	}
	t.Logf("12 tears: %d torn blocks, %d cuts kept nothing", torn, none)
}

// The simulator serves FUSE from the test process, so a mapping of a file
// on its mount must live in another process: a page fault that waits for
// this process's FUSE server can stall the garbage collector, and with it
// the server. TestMain runs the mapping parts as a child of the test binary.
const childEnv = "POWERCUT_TEST_CHILD"

func TestMain(m *testing.M) {
	if what := os.Getenv(childEnv); what != "" {
		if err := child(what, os.Getenv(childEnv+"_PATH")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild runs child(what, path) in a new process of the test binary.
func runChild(t *testing.T, what, path string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+what, childEnv+"_PATH="+path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", what, err, out)
	}
}

const boltValues = 50

func child(what, path string) error {
	switch what {
	case "mmap":
		return mmapChild(path)
	case "bolt-write":
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			return err
		}
		d, err := os.Open(filepath.Dir(path))
		if err != nil {
			return err
		}
		if err := d.Sync(); err != nil {
			return err
		}
		d.Close()
		for i := range boltValues {
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("b"))
				if err != nil {
					return err
				}
				return b.Put([]byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 3000))
			})
			if err != nil {
				return err
			}
		}
		return nil // exits without Close, as a crash would
	case "bolt-check":
		db, err := bolt.Open(path, 0o600, nil)
		if err != nil {
			return err
		}
		defer db.Close()
		return db.View(func(tx *bolt.Tx) error {
			for err := range tx.Check() {
				return fmt.Errorf("bbolt check: %w", err)
			}
			b := tx.Bucket([]byte("b"))
			if b == nil {
				return errors.New("bucket lost")
			}
			for i := range boltValues {
				if v := b.Get([]byte{byte(i)}); !bytes.Equal(v, bytes.Repeat([]byte{byte(i)}, 3000)) {
					return fmt.Errorf("committed value %d lost", i)
				}
			}
			return nil
		})
	}
	return fmt.Errorf("unknown child %q", what)
}

// mmapChild maps the file at path read-only and checks that the mapping
// sees what pwrite writes, as bbolt needs.
func mmapChild(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	page := bytes.Repeat([]byte{'a'}, 2*powercut.BlockSize)
	if _, err := f.WriteAt(page, 0); err != nil {
		return err
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, len(page), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return err
	}
	defer syscall.Munmap(m)
	if !bytes.Equal(m, page) {
		return errors.New("the mapping does not see the first write")
	}
	if _, err := f.WriteAt([]byte("bbolt"), powercut.BlockSize+10); err != nil {
		return err
	}
	if got := string(m[powercut.BlockSize+10 : powercut.BlockSize+15]); got != "bbolt" {
		return fmt.Errorf("the mapping sees %q after pwrite, want %q", got, "bbolt")
	}
	buf := make([]byte, len(page))
	if _, err := f.ReadAt(buf, 0); err != nil {
		return err
	}
	if !bytes.Equal(buf, m) {
		return errors.New("read and the mapping differ")
	}
	return nil
}

// TestMmap: a read-only mapping of a file on the mount sees what pwrite
// wrote through it.
func TestMmap(t *testing.T) {
	p := powercut.New(t, 1)
	runChild(t, "mmap", filepath.Join(p.Dir(), "m"))
}

// TestBbolt: a bbolt database on the mount commits, and survives a cut,
// dropped or torn, with every committed transaction and a valid file.
func TestBbolt(t *testing.T) {
	for _, mode := range []powercut.Mode{powercut.Drop, powercut.Tear} {
		t.Run(mode.String(), func(t *testing.T) {
			p := powercut.New(t, 3)
			path := filepath.Join(p.Dir(), "state.db")
			runChild(t, "bolt-write", path)
			st := cut(t, p, mode)
			t.Logf("cut: %v", st)
			runChild(t, "bolt-check", path)
		})
	}
}

// TestSocket: a Unix socket bound on the mount takes connections (the
// daemon's control socket lives in its data directory), and a cut leaves
// its name as an unbound socket when the name was durable.
func TestSocket(t *testing.T) {
	p := powercut.New(t, 1)
	path := filepath.Join(p.Dir(), "control.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
	c.Close()
	syncDir(t, p.Dir())
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	cut(t, p, powercut.Drop)
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("after the cut: %v, %v", fi, err)
	}
}

// TestSocketRebound: a daemon that starts after a killed one removes the
// stale control socket and binds a new one at the same path, which the
// live filesystem gives the number of the removed one (ext4 reuses it at
// once). The kernel forgets the removed socket's node only later; that
// must not cost the new socket its node: connections, through a lookup
// made after the mount's entry timeout, still reach it.
func TestSocketRebound(t *testing.T) {
	p := powercut.New(t, 1)
	path := filepath.Join(p.Dir(), "control.sock")
	ino := func() uint64 {
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	var ln net.Listener
	for attempt := 0; ln == nil; attempt++ {
		if attempt == 20 {
			t.Skip("the filesystem under the simulator never gave a new socket the number of a removed one")
		}
		old, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		was := ino()
		// Holding the removed socket's inode delays the kernel's FORGET
		// of its node until the new socket is bound: the order a loaded
		// machine gives the FUSE server's goroutines now and then.
		hold, err := syscall.Open(path, unix.O_PATH, 0)
		if err != nil {
			t.Fatal(err)
		}
		old.Close() // removes the name
		ln, err = net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		if ino() != was {
			ln.Close()
			ln = nil
		}
		syscall.Close(hold) // the kernel forgets the removed socket's node
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	wait.Settle(t, 1500*time.Millisecond, "the kernel has sent its FORGET, and the name's entry (1 s) expired: the next connection looks the name up again")
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("connect to the socket bound again: %v", err)
	}
	defer c.Close()
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
}
