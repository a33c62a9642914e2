package main

import (
	"context"
	"errors"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
)

var errNoSelfUpdate = errors.New("self-update is not supported on Windows yet: replace the binary and restart the service")

func selfUpdateSupported() error { return errNoSelfUpdate }

func updateBoot(*config.Config, zerolog.Logger) (bool, error) { return false, nil }

func (u *daemonUpdater) restart() error { return errNoSelfUpdate }

func (u *daemonUpdater) watchStaged(context.Context) {}

func signalApply(int) error { return errNoSelfUpdate }
