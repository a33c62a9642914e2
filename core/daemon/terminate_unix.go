//go:build unix

package daemon

import (
	"errors"
	"os"
	"syscall"
)

// terminate sends SIGTERM: the agent finishes its tick, saves STOPPED and
// exits.
func terminate(p *execProcess) error {
	err := p.cmd.Process.Signal(syscall.SIGTERM)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}
