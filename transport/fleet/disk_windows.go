//go:build windows

package fleet

import "golang.org/x/sys/windows"

// DiskFree returns the bytes free to the caller on the volume holding path,
// or -1.
func DiskFree(path string) int64 {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return -1
	}
	var free, total, totalFree uint64
	if err := windows.GetDiskFreeSpaceEx(p, &free, &total, &totalFree); err != nil {
		return -1
	}
	return int64(free)
}
