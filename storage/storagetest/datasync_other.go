//go:build !linux

package storagetest

import "os"

func datasync(f *os.File) error { return f.Sync() }
