//go:build unix

package control

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// Listen opens the control API's listener in runDir: the unix socket
// control.sock, readable and writable by the daemon's user only. It returns
// the address to hand to the agents. A socket file left by a dead daemon is
// removed first; the caller holds the daemon lock, so no live daemon owns it.
func Listen(runDir string) (net.Listener, string, error) {
	path, err := filepath.Abs(filepath.Join(runDir, SocketFile))
	if err != nil {
		return nil, "", err
	}
	if len(path) > 100 {
		return nil, "", fmt.Errorf("control socket path %s is %d bytes long; unix sockets allow about 100: use a shorter data directory", path, len(path))
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	// Connecting needs write permission on the socket: the umask's usual
	// 022 already keeps others out until the chmod; the token is the
	// second guard.
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("control socket: %w", err)
	}
	return ln, "unix://" + path, nil
}

func discoverAddr(runDir string) (string, error) {
	path, err := filepath.Abs(filepath.Join(runDir, SocketFile))
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%w runs on this data directory (%s: %v)", ErrNoDaemon, path, errors.Unwrap(err))
	}
	return "unix://" + path, nil
}
