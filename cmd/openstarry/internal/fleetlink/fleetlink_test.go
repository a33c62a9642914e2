package fleetlink

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/logx"
)

// TestOpsWithoutDaemon: with no daemon answering on the data directory,
// the hub's status and agent commands fail (the control API is not
// there), and the telemetry still goes out with the device's own figures
// and no agent; logs.tail and config.get need no daemon.
func TestOpsWithoutDaemon(t *testing.T) {
	cfg := config.Default()
	cfg.Data = t.TempDir()
	if err := os.WriteFile(filepath.Join(cfg.Data, "state"), make([]byte, 4096), 0o600); err != nil {
		t.Fatal(err)
	}
	ring := logx.NewRing(10)
	for _, l := range []string{"one\n", "two\n", "three\n"} {
		if _, err := ring.Write([]byte(l)); err != nil {
			t.Fatal(err)
		}
	}
	ops := NewOps(cfg, ring, nil, "1.2.3")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := ops.Status(ctx); err == nil {
		t.Error("Status without a daemon: no error")
	}
	if _, err := ops.Restart(ctx, "master"); err == nil {
		t.Error("Restart without a daemon: no error")
	}
	if _, err := ops.Stop(ctx, "master"); err == nil {
		t.Error("Stop without a daemon: no error")
	}
	if got, want := ops.LogsTail(2), []string{"two", "three"}; !reflect.DeepEqual(got, want) {
		t.Errorf("LogsTail(2) = %q, want %q", got, want)
	}
	if got, want := ops.Config(), any(cfg.Effective()); !reflect.DeepEqual(got, want) {
		t.Errorf("Config() = %v, want the effective configuration %v", got, want)
	}

	started := time.Now().Add(-time.Minute)
	tel := ops.telemetry("dev-1", started, func() map[string]int64 { return map[string]int64{"mqtt_reconnects": 2} })(ctx)
	switch {
	case tel.Device != "dev-1" || tel.Version != "1.2.3":
		t.Errorf("device %q version %q, want dev-1 1.2.3", tel.Device, tel.Version)
	case tel.Agents == nil || len(tel.Agents) != 0:
		t.Errorf("agents %v, want an empty list (the daemon did not answer)", tel.Agents)
	case tel.UptimeSeconds < 59:
		t.Errorf("uptime %ds, want at least 59", tel.UptimeSeconds)
	case tel.StoreBytes < 4096:
		t.Errorf("store %d bytes, want at least the 4096 of the data directory", tel.StoreBytes)
	case tel.Counters["mqtt_reconnects"] != 2:
		t.Errorf("counters %v", tel.Counters)
	}
	if got, want := NoncesPath(cfg), filepath.Join(cfg.Data, "fleet-nonces.json"); got != want {
		t.Errorf("NoncesPath = %s, want %s", got, want)
	}
}
