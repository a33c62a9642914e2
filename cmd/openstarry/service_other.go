//go:build !linux && !windows

package main

import (
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

func serviceLog(cfg *config.Config) (zerolog.Logger, io.Writer, func()) { return stderrLog(cfg) }
