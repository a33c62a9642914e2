//go:build !linux

package main

import (
	"fmt"

	"github.com/kardianos/service"
)

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
