//go:build !linux && !windows

package main

import (
	"fmt"
	"io"
	"os"

	"github.com/kardianos/service"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

func defaultServiceData() string { return "/var/lib/openstarry" }
func defaultServiceUser() string { return "" }

func platformServiceConfig(*service.Config, string, string, string) {}

func prepareServiceData(data, _ string) error { return os.MkdirAll(data, privfs.SharedDirMode) }

func serviceStatus(s service.Service) (service.Status, error) { return s.Status() }

func removeServiceLinks() error { return nil }

func serviceLog(*config.Config) (zerolog.Logger, io.Writer, func()) { return stderrLog() }

// chooseInit: only Linux has a choice of service manager.
func chooseInit(init string) (string, error) {
	if init != "auto" {
		return "", fmt.Errorf("--init %q: only Linux chooses its service manager", init)
	}
	return "", nil
}

// planInstall says what install registers.
func planInstall(c *service.Config, data, user string) installPlan {
	return installPlan{Manager: service.Platform(), Command: serviceCommand(c.Arguments), Data: data, User: user}
}

func removeServiceLinksIfNew([]string) error { return nil }
