//go:build windows

package control

import (
	"errors"
	"fmt"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"net"
	"os"
	"path/filepath"
	"strings"
)

// Listen opens the control API's listener: loopback TCP on a free port,
// whose address it writes to runDir/control.addr for the operator's
// commands (Windows has no unix sockets that every supported version
// offers). The token, not the port, is what keeps other local users out.
func Listen(runDir string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", fmt.Errorf("control listener: %w", err)
	}
	addr := "tcp://" + ln.Addr().String()
	if err := atomicfile.WriteFile(filepath.Join(runDir, AddrFile), []byte(addr+"\n"), 0o600); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("control address file: %w", err)
	}
	return ln, addr, nil
}

func discoverAddr(runDir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(runDir, AddrFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%w runs on this data directory (no %s)", ErrNoDaemon, filepath.Join(runDir, AddrFile))
		}
		return "", err
	}
	return strings.TrimSpace(string(data)), nil
}
