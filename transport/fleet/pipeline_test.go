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
	m := mqtttest.StartMosquitto(b, mqtttest.Options{NoPersistence: true, Extra: []string{"set_tcp_nodelay true"}})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master", Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if _, _, err := c.Claim(ctx, "warm"); err != nil {
		b.Fatal(err)
	}
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
	old := batchLinger
	batchLinger = time.Second
	t.Cleanup(func() { batchLinger = old })
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"set_tcp_nodelay true"}})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	if _, mine, err := c.Claim(ctx, "first"); err != nil || !mine {
		t.Fatalf("first: %v %v", mine, err)
	}
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
	old := batchLinger
	batchLinger = time.Hour
	t.Cleanup(func() { batchLinger = old })
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"set_tcp_nodelay true"}})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, mine, err := c.Claim(ctx, "first"); err != nil || !mine {
		t.Fatalf("first: %v %v", mine, err)
	}
	var wg sync.WaitGroup
	for i := range lingerFull {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "f-" + strconv.Itoa(i)
			if _, mine, err := c.Claim(ctx, id); err != nil || !mine {
				t.Errorf("%s: %v %v", id, mine, err)
			}
		}()
	}
	wg.Wait()
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
	oldLinger, oldHold := batchLinger, releaseHold
	batchLinger, releaseHold = time.Hour, time.Hour
	t.Cleanup(func() { batchLinger, releaseHold = oldLinger, oldHold })
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"set_tcp_nodelay true"}})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, mine, err := c.Claim(ctx, "first"); err != nil || !mine {
		t.Fatalf("first: %v %v", mine, err)
	}
	var wg sync.WaitGroup
	for i := range lingerFull {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := "g-" + strconv.Itoa(i)
			if _, mine, err := c.Claim(ctx, id); err != nil || !mine {
				t.Errorf("%s: %v %v", id, mine, err)
			}
		}()
	}
	wg.Wait()
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
