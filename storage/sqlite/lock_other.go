//go:build windows || plan9 || js || wasip1

package sqlite

import "errors"

// lockPath: the repair of the first page (header.go) needs a lock between
// processes, which this build does not take: the database stays refused.
func lockPath(string) (func(), error) {
	return nil, errors.New("no file lock on this system")
}
