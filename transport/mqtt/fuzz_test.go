package mqtt_test

import (
	"testing"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// FuzzParseBrokerURL: the broker URL reader never panics, and a URL it
// accepts names a host and a port and has no path.
func FuzzParseBrokerURL(f *testing.F) {
	for _, s := range []string{"tcp://127.0.0.1:1883", "mqtts://hub.example", "ssl://[::1]", "http://x", "tcp://", "tcp://h/path", "tls://user:pw@h:8883"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, _, err := mqtt.ParseBrokerURL(raw)
		if err != nil {
			return
		}
		if u.Hostname() == "" || u.Port() == "" || u.Path != "" {
			t.Fatalf("ParseBrokerURL(%q) = %v", raw, u)
		}
	})
}
