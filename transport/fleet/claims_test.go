package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestClaimsRace: two devices claim the same 200 task ids at the same
// instant through a real Mosquitto; for each exactly one wins and both
// name the same owner. A device that connects afterwards learns the owners
// from the retained claims, and a task whose claim is done stays its
// owner's.
func TestClaimsRace(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	start := func(dev string) *Claims {
		c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: dev, Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b := start("dev-a"), start("dev-b")
	ctx := context.Background()
	const n = 200
	owners := map[string]string{}
	for i := range n {
		id := fmt.Sprintf("t-%03d", i)
		type res struct {
			owner string
			mine  bool
			err   error
		}
		var ra, rb res
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ra.owner, ra.mine, ra.err = a.Claim(ctx, id) }()
		go func() { defer wg.Done(); rb.owner, rb.mine, rb.err = b.Claim(ctx, id) }()
		wg.Wait()
		if ra.err != nil || rb.err != nil {
			t.Fatalf("%s: %v %v", id, ra.err, rb.err)
		}
		if ra.mine == rb.mine || ra.owner != rb.owner {
			t.Fatalf("%s: dev-a %+v, dev-b %+v: want exactly one owner both agree on", id, ra, rb)
		}
		owners[id] = ra.owner
	}
	wins := map[string]int{}
	for _, o := range owners {
		wins[o]++
	}
	t.Logf("wins %v", wins)
	a.Done("t-000")
	c := start("dev-c")
	for id, want := range owners {
		owner, mine, err := c.Claim(ctx, id)
		if err != nil || mine || owner != want {
			t.Fatalf("late device, %s: %s %v %v, want %s", id, owner, mine, err, want)
		}
	}
}

// TestClaimExpiryCapped: a claim retained by a device user with an expiry
// in 2099 holds only RunTTL from when a device sees it (DoneTTL for a done
// one); then the device claims the task itself.
func TestClaimExpiryCapped(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	pc, err := mqtt.Dial(context.Background(), mqtt.DialOptions{Broker: m.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Disconnect(10)
	for id, state := range map[string]string{"t-run": ClaimRunning, "t-done": ClaimDone} {
		b, _ := json.Marshal(Claim{TaskID: id, Device: "squatter", State: state, Nonce: "x",
			Expires: time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err := mqtt.WaitToken(context.Background(), pc.Publish(ClaimTopic("openstarry", id), 1, true, b), 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a",
		RunTTL: 500 * time.Millisecond, DoneTTL: time.Second, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	for _, id := range []string{"t-run", "t-done"} {
		owner, mine, err := c.Claim(ctx, id)
		if err != nil || mine || owner != "squatter" {
			t.Fatalf("%s at first: %s %v %v, want the squatter's claim to hold", id, owner, mine, err)
		}
		wait.For(t, 30*time.Second, id+" claimed by dev-a once the capped claim has expired", func() bool {
			owner, mine, err = c.Claim(ctx, id)
			return err == nil && mine && owner == "dev-a"
		})
	}
}
