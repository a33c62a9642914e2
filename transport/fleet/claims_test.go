package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/rs/zerolog"

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
