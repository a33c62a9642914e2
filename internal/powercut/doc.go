// Package powercut is a power-cut simulator for tests: a FUSE filesystem
// that passes every read and write through to a live directory, as a disk's
// page cache would, while it keeps in a durable image only what the
// programs above it made durable, and a Cut that throws the difference
// away, or part of it, and mounts the durable image again.
//
// Its semantics follow LazyFS (a FUSE filesystem with its own page cache
// whose unsynced data a "clear-cache" fault drops, and whose "torn-op" and
// "torn-seq" faults persist part of a write) with POSIX's strict reading of
// what fsync promises:
//
//   - file data and size are durable once fsync or fdatasync of the file
//     returns (through any descriptor of it);
//   - a name (create, mkdir, link, rename, unlink, rmdir) is durable once
//     fsync of the directory holding it returns; fsync of a file does not
//     make its name durable, and a rename is durable in each of its two
//     directories only when that directory is fsynced;
//   - mode bits, times and extended attributes are not modelled: they are
//     as the live directory has them when a file is created;
//   - regular files, directories, hard links, Unix sockets and FIFOs are
//     modelled; symbolic links, device nodes and RENAME_EXCHANGE are
//     refused (EPERM, EINVAL); copy_file_range answers ENOSYS so that the
//     kernel copies with reads and writes.
//
// A block reaches the disk either as it was durable or as its latest
// write: the intermediate contents a real writeback could also leave are
// not modelled.
//
// A Cut in mode Drop loses everything not durable. A Cut in mode Tear
// loses part of it: the pending data blocks (4 KiB) and size changes of
// every file are put in a random order, as writeback might send them, a
// random prefix of that order reaches the disk, and the last block of the
// prefix is torn, with only its first sectors (512 bytes each) written;
// the pending namespace operations reach the disk as a random subset
// applied in the order they were made, as a journal replays them.
//
// Reads, mmap included, go through the kernel's page cache of the FUSE
// mount (no direct I/O), so a program that maps a file (bbolt maps its
// database read-only and writes it with pwrite) sees what read(2) sees.
// Locks (flock, fcntl) are left to the kernel, which keeps them per mount.
//
// The invariant: after a Cut, the tree under the mount point is exactly
// the durable image the model computed, and everything a program made
// durable before the Cut is in it.
package powercut
