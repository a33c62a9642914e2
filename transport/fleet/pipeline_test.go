package fleet

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// BenchmarkClaimOne: one device's claims against Mosquitto (with
// set_tcp_nodelay, as packaging/mosquitto/hub.conf sets it), one task at a
// time: ns/op is the time a fleet task waits for its claim (the round
// trips to the hub: the SUBSCRIBE, its barrier, then the claim and its
// echo), and batchLinger between two. Against Mosquitto's default (Nagle's
// algorithm on) it was 40 ms, the device's delayed acknowledgement.
func BenchmarkClaimOne(b *testing.B) {
	c := startBenchClaims(b, true)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		id := "one-" + strconv.Itoa(i)
		if _, mine, err := c.Claim(ctx, id); err != nil || !mine {
			b.Fatal(id, mine, err)
		}
		c.Done(id)
	}
}

// TestClaimsLinger: the claims of fleet tasks that come one after another
// within batchLinger of a batch go in one SUBSCRIBE, not one each (a
// batch costs the device and the hub eight packets besides its claims).
func TestClaimsLinger(t *testing.T) {
	c, ctx := lingeringClaims(t, time.Second)
	// Ten more, 20 ms apart: each comes after the one before it was
	// subscribed, were it sent at once.
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "t-" + strconv.Itoa(i)
			if _, mine, err := c.Claim(ctx, id); err != nil || !mine {
				t.Errorf("%s: %v %v", id, mine, err)
			}
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if sub, _ := c.Batches(); sub > 3 {
		t.Errorf("%d SUBSCRIBE packets for 11 claims, want the first alone and the ten others together", sub)
	}
}

// TestClaimsLingerFull: lingerFull claims waiting for their batch end its
// wait; they do not wait out batchLinger (a device the hub lets hold only
// so many fleet tasks unacknowledged would claim that many per linger).
func TestClaimsLingerFull(t *testing.T) {
	c, ctx := lingeringClaims(t, time.Hour)
	claimAll(ctx, t, c, "f-", lingerFull)
	if sub, _ := c.Batches(); sub != 2 {
		t.Errorf("%d SUBSCRIBE packets, want 2: the first claim's, then the %d others' together", sub, lingerFull)
	}
}

// BenchmarkClaimStream: as BenchmarkClaim against a hub with
// set_tcp_nodelay (as packaging/mosquitto/hub.conf sets it), the done
// claims left out: the claims' own processor time per task, 64 at a time.
func BenchmarkClaimStream(b *testing.B) {
	benchClaims(b, claimBench{nodelay: true, inFlight: 64})
}

// BenchmarkClaimSparse: as BenchmarkClaimStream, with the tasks coming
// one every 2 ms, as each device of a fleet gets every N-th fleet task:
// the processor time per task with the batches at least batchLinger
// apart (OPENSTARRY_BATCH_LINGER, a duration, sets it here).
func BenchmarkClaimSparse(b *testing.B) {
	if v := os.Getenv("OPENSTARRY_BATCH_LINGER"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			b.Fatal(err)
		}
		old := batchLinger
		batchLinger = d
		defer func() { batchLinger = old }()
	}
	benchClaims(b, claimBench{nodelay: true, every: 2 * time.Millisecond})
}

// TestClaimsAnsweredTogether: the answers of a batch's claims are held
// while others of the batch wait for their echoes, and given when the last
// comes (releaseHold is an hour here: a held answer not given then would
// fail its claim); and an answer held for an echo that never comes is
// given after releaseHold.
func TestClaimsAnsweredTogether(t *testing.T) {
	old := releaseHold
	releaseHold = time.Hour
	t.Cleanup(func() { releaseHold = old })
	c, ctx := lingeringClaims(t, time.Hour)
	claimAll(ctx, t, c, "g-", lingerFull)
	c.mu.Lock()
	t.Logf("%d claims answered in %d groups", lingerFull+1, c.answered)
	// An echo that never comes: the answer of the next claim is held for
	// it, up to releaseHold.
	releaseHold, c.linger = 100*time.Millisecond, 0
	c.pending["never"] = make(chan claimWait, 1)
	c.mu.Unlock()
	if _, mine, err := c.Claim(ctx, "after"); err != nil || !mine {
		t.Fatalf("a claim while another's echo never comes: %v %v", mine, err)
	}
}

// lingeringClaims starts claims against a Mosquitto with set_tcp_nodelay,
// their batches linger apart, and makes a first claim (which goes at
// once); the context ends in 20 s.
func lingeringClaims(t *testing.T, linger time.Duration) (*Claims, context.Context) {
	t.Helper()
	old := batchLinger
	batchLinger = linger
	t.Cleanup(func() { batchLinger = old })
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"set_tcp_nodelay true"}})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	if _, mine, err := c.Claim(ctx, "first"); err != nil || !mine {
		t.Fatalf("first: %v %v", mine, err)
	}
	return c, ctx
}

// claimAll claims n tasks (prefix and a number) at once, each to be won.
func claimAll(ctx context.Context, t *testing.T, c *Claims, prefix string, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := prefix + strconv.Itoa(i)
			if _, mine, err := c.Claim(ctx, id); err != nil || !mine {
				t.Errorf("%s: %v %v", id, mine, err)
			}
		}()
	}
	wg.Wait()
}
