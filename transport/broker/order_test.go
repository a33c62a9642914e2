package broker

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestOneOrderPerTopic: publishers that publish to one topic at once, and
// subscribers to it; every subscriber receives the messages in one order
// (third_party/mochi-mqtt/OPENSTARRY.md, item 5). The fleet claims rely on
// it: the first claim of a task every claimant sees wins. Upstream handed a
// message to the subscribers one after another in the publisher's
// goroutine, with nothing to keep another publisher's message from
// reaching some of them first: two claimants each saw its own claim first
// and both ran the task (TestClaimRaceLoserKilled in transport/fleet, now
// and then on this broker).
func TestOneOrderPerTopic(t *testing.T) {
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	const (
		topic      = "openstarry/fleet/claims/order"
		publishers = 4
		subs       = 4
		each       = 400
	)
	connect := func(id string) paho.Client {
		c := paho.NewClient(paho.NewClientOptions().AddBroker(b.URL()).SetClientID(id).SetProtocolVersion(4).SetOrderMatters(true))
		if tok := c.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("%s: %v", id, tok.Error())
		}
		t.Cleanup(func() { c.Disconnect(10) })
		return c
	}
	var mu sync.Mutex
	got := make([][]string, subs)
	for i := range subs {
		c := connect(fmt.Sprintf("sub-%d", i))
		tok := c.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
			if m.Retained() {
				// The retained copy a new subscription gets: mochi
				// sends it after the SUBACK, so a publication that
				// follows the SUBACK at once can come twice, live
				// and then as the retained copy. Not the order of
				// the topic's messages, which is what is tested.
				return
			}
			mu.Lock()
			got[i] = append(got[i], string(m.Payload()))
			mu.Unlock()
		})
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatal(tok.Error())
		}
	}
	var wg sync.WaitGroup
	for p := range publishers {
		c := connect(fmt.Sprintf("pub-%d", p))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				c.Publish(topic, 1, true, fmt.Sprintf("%d-%d", p, i))
			}
		}()
	}
	wg.Wait()
	wait.For(t, 60*time.Second, "every message received", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, g := range got {
			if len(g) < publishers*each {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < subs; i++ {
		if !slices.Equal(got[0], got[i]) {
			for j := range got[0] {
				if got[0][j] != got[i][j] {
					t.Fatalf("subscriber %d received %s at %d where subscriber 0 received %s: two orders of one topic", i, got[i][j], j, got[0][j])
				}
			}
		}
	}
}
