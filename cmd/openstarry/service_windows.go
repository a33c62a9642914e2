//go:build windows

package main

import (
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/kardianos/service"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/logx"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

func defaultServiceData() string {
	pd := os.Getenv("ProgramData")
	if pd == "" {
		pd = `C:\ProgramData`
	}
	return filepath.Join(pd, "OpenStarry", "data")
}

// defaultServiceUser is LocalSystem; --user "NT SERVICE\openstarry" gives
// the service a virtual account (grant it the data directory).
func defaultServiceUser() string { return "" }

// platformServiceConfig starts the service at boot and has the service
// control manager restart it after a failure.
func platformServiceConfig(c *service.Config, _, _, _ string) {
	c.Option["StartType"] = "automatic"
	c.Option["DelayedAutoStart"] = true
	c.Option["OnFailure"] = "restart"
	c.Option["OnFailureDelayDuration"] = "5s"
	c.Option["OnFailureResetPeriod"] = 86400
}

func serviceStatus(s service.Service) (service.Status, error) { return s.Status() }

// removeServiceLinks: the service control manager keeps no links.
func removeServiceLinks() error { return nil }

func prepareServiceData(data, _ string) error { return os.MkdirAll(data, privfs.SharedDirMode) }

// serviceLog: a Windows service has no stderr anyone reads; the daemon and
// its agents log JSON lines to DATA\logs\openstarry.log, rotated by size
// (10 MiB, three files kept: openstarry.log, .1, .2).
func serviceLog(cfg *config.Config) (zerolog.Logger, io.Writer, func()) {
	dir := filepath.Join(cfg.Data, "logs")
	if err := privfs.MkdirAll(dir); err != nil {
		return stderrLog(cfg)
	}
	f := &logx.RotatingFile{Path: filepath.Join(dir, "openstarry.log"), MaxBytes: 10 << 20, Keep: 3}
	if _, err := f.Write(nil); err != nil {
		return stderrLog(cfg)
	}
	w := &lockedWriter{w: f}
	return logx.New(w, logx.Options{Level: cfg.Log.Level, Format: "json"}), w, func() { f.Close() }
}

// lockedWriter serialises writes from the daemon's logger and the agents'
// forwarded lines.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
