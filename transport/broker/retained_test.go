package broker

import (
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"testing"
	"time"
	"unsafe"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestRetainedExpiry checks the embedded broker's once-a-second expiry
// check of the retained messages (third_party/mochi-mqtt/OPENSTARRY.md,
// item 4): it removes what upstream removed (an MQTT 5 message past its
// expiry; any message older than MaximumMessageExpiryInterval when one is
// set) and keeps the rest, and it no longer copies the whole map to look:
// the tick that removes one expired message among thousands allocates less
// than one copy of them would (upstream's GetAll copied every packet each
// second, 1.24 MB a minute in an idle `openstarry run`).
func TestRetainedExpiry(t *testing.T) {
	const many = 5000
	for _, tc := range []struct {
		name      string
		maxExpiry int64
		gone      []string
		kept      []string
	}{
		{"no maximum", 0, []string{"t/v5-expired"}, []string{"t/v5-later", "t/v4-expired", "t/v5-old"}},
		{"maximum 10s", 10, []string{"t/v5-expired", "t/v5-old"}, []string{"t/v5-later"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := mqtt.NewDefaultServerCapabilities()
			caps.MaximumMessageExpiryInterval = tc.maxExpiry
			s := mqtt.New(&mqtt.Options{Capabilities: caps, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			now := time.Now().Unix()
			retain := func(topic string, version byte, created, expiry int64) {
				s.Topics.RetainMessage(packets.Packet{
					FixedHeader:     packets.FixedHeader{Type: packets.Publish, Retain: true},
					TopicName:       topic,
					Payload:         []byte("x"),
					ProtocolVersion: version,
					Created:         created,
					Expiry:          expiry,
				})
			}
			for i := range many {
				retain("t/keep/"+strconv.Itoa(i), 4, now, 0)
			}
			retain("t/v5-later", 5, now, now+3600)
			retain("t/v5-old", 5, now-100, 0)
			retain("t/v4-expired", 4, now, now-100)
			if err := s.Serve(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			// Added after Serve: the tick that removes it has read the
			// whole map.
			retain("t/v5-expired", 5, now, now-1)
			wait.For(t, 30*time.Second, "the expired retained messages to be removed", func() bool {
				for _, f := range tc.gone {
					if _, ok := s.Topics.Retained.Get(f); ok {
						return false
					}
				}
				return true
			})
			runtime.ReadMemStats(&after)
			for _, f := range tc.kept {
				if _, ok := s.Topics.Retained.Get(f); !ok {
					t.Errorf("%s was removed; it has not expired", f)
				}
			}
			for _, f := range []string{"t/keep/0", "t/keep/" + strconv.Itoa(many-1)} {
				if _, ok := s.Topics.Retained.Get(f); !ok {
					t.Errorf("%s was removed; it has no expiry", f)
				}
			}
			if tc.maxExpiry > 0 {
				return
			}
			copyBytes := uint64(many) * uint64(unsafe.Sizeof(packets.Packet{}))
			got := after.TotalAlloc - before.TotalAlloc
			t.Logf("the tick that removed the expired message: %d bytes allocated in the process, %d retained messages (a copy of them: %d bytes)", got, many, copyBytes)
			if got > copyBytes/2 {
				t.Errorf("the expiry check allocated %d bytes with %d retained messages; a copy of them is %d", got, many, copyBytes)
			}
		})
	}
}
