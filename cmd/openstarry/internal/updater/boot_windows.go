package updater

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/update"
)

var errNoSelfUpdate = errors.New("self-update is not supported on Windows yet: replace the binary and restart the service")

// Supported says whether this platform updates itself: not Windows, yet.
func Supported() error { return errNoSelfUpdate }

// Boot has nothing to do on Windows: no update is ever installed there.
func Boot(*config.Config, update.Info, zerolog.Logger) (handled, trial bool, err error) {
	return false, false, nil
}

// Restart cannot run an update on Windows.
func (u *Daemon) Restart() error { return errNoSelfUpdate }

// WatchStaged has nothing to watch on Windows.
func (u *Daemon) WatchStaged(context.Context) {}

func signalApply(int) error { return errNoSelfUpdate }
