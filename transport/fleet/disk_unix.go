//go:build unix

package fleet

import "golang.org/x/sys/unix"

// DiskFree returns the bytes free to an unprivileged user on the file
// system holding path, or -1.
func DiskFree(path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return -1
	}
	return int64(st.Bavail) * int64(st.Bsize)
}
