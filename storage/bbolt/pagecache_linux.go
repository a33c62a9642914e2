package bbolt

import (
	"os"

	"golang.org/x/sys/unix"
)

// openFile opens an agent's file for bbolt and keeps the kernel's page
// cache of it in single pages. Linux caches a file in folios of up to
// several pages (the four pages bbolt writes in one call when it creates a
// file make one folio of 16 KiB, a readahead makes larger ones), and a
// write to one page of a folio dirties, and counts as written, the whole
// folio: every commit's meta page would cost 16 KiB instead of 4. So the
// file's clean cached pages are dropped when it is opened, and readahead,
// which would build large folios again, is turned off for it (bbolt maps
// the file with MADV_RANDOM already; this covers its reads). Both are
// hints: an error is ignored and changes nothing but the figures.
func openFile(name string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	dropCache(f)
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM)
	return f, nil
}

// dropCache drops the clean cached pages of f, so that the next writes
// cache it page by page again (the journal's are written whole once, then
// a page at a time).
func dropCache(f *os.File) { _ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED) }
