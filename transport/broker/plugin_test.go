package broker

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// TestPlugin: the registry builds the embedded broker; a users file is read
// before anything starts; an address other than the default that is taken
// is an error, never a silent reuse.
func TestPlugin(t *testing.T) {
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	if _, err := plugin.NewBroker(plugin.BrokerConfig{UsersFile: filepath.Join(t.TempDir(), "missing.json"), Log: log}); err == nil {
		t.Fatal("a missing users file was accepted")
	}
	b, err := plugin.NewBroker(plugin.BrokerConfig{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Embedded() || !strings.HasPrefix(b.URL(), "tcp://127.0.0.1:") {
		t.Fatalf("embedded %v, url %q", b.Embedded(), b.URL())
	}
	if r := connect(t, b.URL(), "plugin-probe", "", "", true, nil); r.err != nil {
		t.Fatalf("connect to the plugin's broker: %v", r.err)
	}

	taken := strings.TrimPrefix(b.URL(), "tcp://")
	second, err := plugin.NewBroker(plugin.BrokerConfig{Listen: taken, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(context.Background()); !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second broker on %s: %v, want ErrAddrInUse", taken, err)
	}
	if second.Embedded() || second.Close() != nil {
		t.Fatal("the refused broker reports itself running")
	}
}

// TestPluginBounds: the plugin hands its bounds (the mqtt.broker_* keys) to
// the broker: with a cap of one connection, a second client is refused.
func TestPluginBounds(t *testing.T) {
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b, err := plugin.NewBroker(plugin.BrokerConfig{Listen: "127.0.0.1:0", Log: log, MaxConnections: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := connect(t, b.URL(), "first", "", "", true, nil); r.err != nil {
		t.Fatalf("first client: %v", r.err)
	}
	if r := connect(t, b.URL(), "second", "", "", true, nil); r.err == nil {
		t.Fatal("a second client was accepted by a broker capped at one connection")
	}
}
