package bbolt

import (
	"errors"
	"os"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A Save's journal record is made durable with fdatasync, and a system
// call holds the Go processor its thread runs on until it returns. An
// agent runs its Go code on one processor (cmd/openstarry/procs.go), so
// while its save waits for the disk nothing else of the agent runs: not
// the goroutines that read its next requests, whose tasks would join the
// next save. Only the runtime's monitor thread, when it sees the call last
// across two of its rounds, hands the processor over; it rounds every
// 20 µs while the process is busy, but may round every 10 ms, and on a
// slow SD card a sync takes milliseconds.
//
// In a busy spell (agent.BusySave: tasks come in several at a time), the
// journal's save makes the same fdatasync wait in the runtime's network
// poller instead (datasyncPolled), as a read of a socket does: it asks the kernel for it through
// Linux AIO (IOCB_CMD_FDSYNC, which runs vfs_fsync_range(file, datasync)
// on a kernel worker, the call fdatasync makes), with an eventfd that the
// kernel signals when it is done, and parks the goroutine on that eventfd.
// The processor runs the agent's other goroutines meanwhile. What is
// durable when it returns is what fdatasync makes durable; an error of
// the sync (EIO) is returned as fdatasync returns it. Out of a busy spell
// the plain call answers sooner (no kernel worker, no poller round):
// one client's sequential task over HTTP took 0.26–0.30 ms with it and
// 0.29–0.36 with AIO (docs/figures.md, "the runtime's monitor thread").
//
// Where the kernel cannot (no AIO: ENOSYS or the system's aio-max-nr
// reached at io_setup; a kernel before 4.18 or a file system without AIO
// fsync: EINVAL at io_submit), aioSync falls back to fdatasync for good.
// Measured in docs/figures.md ("the runtime's monitor thread").
type aioSyncer struct {
	mu     sync.Mutex // one sync in flight
	failed bool       // AIO refused: fdatasync from now on
	ctx    uintptr    // aio_context_t; 0 until set up
	efd    *os.File   // the eventfd, non-blocking, in the poller
	efdNum int        // its descriptor (os.File.Fd would make it blocking)
	cb     iocb       // on the heap: io_submit reads it
	cbs    [1]*iocb
	ev     [1]ioEvent
	buf    [8]byte
}

// iocb is struct iocb of linux/aio_abi.h. aio_key and aio_rw_flags, whose
// order depends on the byte order, are both 0 here.
type iocb struct {
	data      uint64
	key       uint32
	rwFlags   uint32
	opcode    uint16
	reqprio   int16
	fildes    uint32
	buf       uint64
	nbytes    uint64
	offset    int64
	reserved2 uint64
	flags     uint32
	resfd     uint32
}

// ioEvent is struct io_event of linux/aio_abi.h.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

const (
	iocbCmdFdsync = 3      // IOCB_CMD_FDSYNC
	iocbFlagResfd = 1 << 0 // IOCB_FLAG_RESFD
)

var syncer aioSyncer

// datasync makes what was written to f durable, without its times.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// datasyncPolled is datasync waiting in the poller (aioSyncer): for a
// journal's save in a busy spell (agent.BusySave).
func datasyncPolled(f *os.File) error { return syncer.sync(int(f.Fd())) }

// aioRefused reports whether the kernel refused AIO fsync, so that the
// journal's syncs are plain fdatasyncs from now on.
func aioRefused() bool {
	syncer.mu.Lock()
	defer syncer.mu.Unlock()
	return syncer.failed
}

func (s *aioSyncer) sync(fd int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed || s.ctx == 0 && !s.setup() {
		return unix.Fdatasync(fd)
	}
	s.cb = iocb{opcode: iocbCmdFdsync, fildes: uint32(fd), flags: iocbFlagResfd, resfd: uint32(s.efdNum)}
	s.cbs[0] = &s.cb
	n, _, errno := unix.Syscall(unix.SYS_IO_SUBMIT, s.ctx, 1, uintptr(unsafe.Pointer(&s.cbs[0])))
	if errno != 0 || n != 1 {
		s.failed = true // EINVAL: no AIO fsync here
		return unix.Fdatasync(fd)
	}
	// The kernel adds 1 to the eventfd's counter when the sync is done;
	// the read parks this goroutine in the poller until then.
	for {
		_, err := s.efd.Read(s.buf[:])
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			// The eventfd failed, which it does not: the sync is still
			// in flight. Wait for it on this thread, as fdatasync would.
			s.failed = true
			break
		}
	}
	for {
		n, _, errno = unix.Syscall6(unix.SYS_IO_GETEVENTS, s.ctx, 1, 1, uintptr(unsafe.Pointer(&s.ev[0])), 0, 0)
		if errno != syscall.EINTR {
			break
		}
	}
	if errno != 0 {
		return errno
	}
	if n != 1 {
		return errors.New("io_getevents: no event for the sync")
	}
	if res := s.ev[0].res; res < 0 {
		return syscall.Errno(-res)
	}
	return nil
}

// setup makes the AIO context and the eventfd; false (and fdatasync from
// now on) when the kernel refuses either.
func (s *aioSyncer) setup() bool {
	efd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		s.failed = true
		return false
	}
	var ctx uintptr
	if _, _, errno := unix.Syscall(unix.SYS_IO_SETUP, 1, uintptr(unsafe.Pointer(&ctx)), 0); errno != 0 {
		unix.Close(efd)
		s.failed = true
		return false
	}
	s.ctx, s.efdNum, s.efd = ctx, efd, os.NewFile(uintptr(efd), "aio-eventfd")
	return true
}
