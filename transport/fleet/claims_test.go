package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
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

// TestClaimsScale: six devices on a real Mosquitto; one of them claims 100
// fleet tasks and marks them done. The others take no part: they receive
// no claim and keep none, and the hub sends a bounded number of messages
// per task, whatever the number of devices (it sent every claim, running
// and done, to every device: 2N+2 per task). The claimant keeps only the
// ids of its done claims, to clear them.
func TestClaimsScale(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"sys_interval 1"}})
	sent := sysCounter(t, m.URL(), "$SYS/broker/publish/messages/sent")
	var all []*Claims
	for i := range 6 {
		c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: fmt.Sprintf("dev-%d", i), Agent: "master",
			Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		all = append(all, c)
	}
	ctx := context.Background()
	// Connected, and the counter settled.
	for _, c := range all {
		select {
		case <-c.ready:
		case <-time.After(20 * time.Second):
			t.Fatal("not connected")
		}
	}
	before := sent.settled(t)
	const n = 100
	for i := range n {
		id := fmt.Sprintf("scale-%03d", i)
		owner, mine, err := all[0].Claim(ctx, id)
		if err != nil || !mine || owner != "dev-0" {
			t.Fatalf("%s: %s %v %v", id, owner, mine, err)
		}
		all[0].Done(id)
	}
	// The done claims go DefendFor after their claims were won.
	doneClaims := func(want int) {
		t.Helper()
		wait.For(t, DefaultDefendFor+60*time.Second, "the done claims published", func() bool {
			held, done := all[0].Held()
			return held == 0 && done == want
		})
	}
	doneClaims(n)
	after := sent.settled(t)
	perTask := float64(after-before) / n
	t.Logf("hub messages sent per fleet task with %d devices: %.2f", len(all), perTask)
	if perTask > 3 {
		t.Errorf("%.2f hub messages per fleet task with %d devices, want at most 3", perTask, len(all))
	}
	// Under load: 64 claims at a time share a SUBSCRIBE, its barrier and
	// an UNSUBSCRIBE.
	before = after
	sub0, _ := all[0].Batches()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 64 {
				id := fmt.Sprintf("load-%03d", i)
				if owner, mine, err := all[0].Claim(ctx, id); err != nil || !mine || owner != "dev-0" {
					errs <- fmt.Errorf("%s: %s %v %v", id, owner, mine, err)
					return
				}
				all[0].Done(id)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	doneClaims(2 * n)
	after = sent.settled(t)
	sub1, _ := all[0].Batches()
	t.Logf("hub messages sent per fleet task, 64 claimed at a time: %.2f (%d tasks per SUBSCRIBE and barrier)",
		float64(after-before)/n, n/max(1, int(sub1-sub0)))
	for i, c := range all[1:] {
		if r := c.Received(); r != 0 {
			t.Errorf("dev-%d received %d claims of tasks it never had", i+1, r)
		}
		if held, done := c.Held(); held != 0 || done != 0 {
			t.Errorf("dev-%d keeps %d claims and %d done ones", i+1, held, done)
		}
	}
	if held, done := all[0].Held(); held != 0 || done != 2*n {
		t.Errorf("dev-0 keeps %d claims and %d done ones, want 0 and %d", held, done, 2*n)
	}
}

// counter follows one of Mosquitto's $SYS counters.
type counter struct {
	mu   sync.Mutex
	val  int64
	self int64 // the counter's own publications received, up to val's
	at   time.Time
}

func sysCounter(t *testing.T, url, topic string) *counter {
	c := &counter{}
	pc := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("sys-" + strings.ReplaceAll(topic, "/", "-")).SetProtocolVersion(4))
	if tok := pc.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	t.Cleanup(func() { pc.Disconnect(10) })
	tok := pc.Subscribe(topic, 0, func(_ paho.Client, m paho.Message) {
		v, err := strconv.ParseInt(string(m.Payload()), 10, 64)
		if err == nil {
			c.mu.Lock()
			c.val, c.at = v, time.Now()
			c.self++
			c.mu.Unlock()
		}
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	return c
}

// settled waits until the counter was published twice with one value,
// minus the publications of the counter itself to this subscriber.
func (c *counter) settled(t *testing.T) int64 {
	var last int64 = -1
	var stable int
	err := wait.Poll(60*time.Second, func() error {
		time.Sleep(1100 * time.Millisecond)
		c.mu.Lock()
		v := c.val - c.self
		c.mu.Unlock()
		if v == last {
			stable++
		} else {
			stable = 0
		}
		last = v
		if stable >= 2 {
			return nil
		}
		return errors.New("still moving")
	})
	if err != nil {
		t.Fatal(err)
	}
	return last
}

// TestClaimsTwoAgentsOneDevice: a daemon's master and an agent run beside
// it with the same device id both take fleet tasks; the same 50 task ids
// claimed by both at once are won by exactly one of them. (Claims named the
// device only, so both won: the same task ran on both agents.)
func TestClaimsTwoAgentsOneDevice(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	start := func(agent string) *Claims {
		c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-1", Agent: agent,
			Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b := start("master"), start("assistant")
	ctx := context.Background()
	for i := range 50 {
		id := fmt.Sprintf("two-%02d", i)
		var ma, mb bool
		var ea, eb error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, ma, ea = a.Claim(ctx, id) }()
		go func() { defer wg.Done(); _, mb, eb = b.Claim(ctx, id) }()
		wg.Wait()
		if ea != nil || eb != nil || ma == mb {
			t.Fatalf("%s: master won %v (%v), assistant won %v (%v): want exactly one", id, ma, ea, mb, eb)
		}
	}
}

// TestClaimOfDoneTaskKeepsDone: a copy of a task this device already ran
// (a sender published it again, or the hub delivered it twice) is claimed
// again by the same device: the claim says it is this device's, and the
// retained claim stays done for its 24 hours. (The device overwrote its
// done claim with a running one, which others take for 1 hour only: after
// that a third copy ran the task again on another device.)
func TestClaimOfDoneTaskKeepsDone(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		DefendFor: time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	if owner, mine, err := c.Claim(ctx, "again"); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("first claim: %s %v %v", owner, mine, err)
	}
	c.Done("again")
	// The done claim goes at the end of the claim's defence (DefendFor),
	// in the background.
	col := mqtttest.Collect(t, m.URL(), "look-done", true, ClaimTopic("openstarry", "again"))
	var cl Claim
	wait.For(t, 10*time.Second, "the done claim", func() bool {
		ms := col.Messages(ClaimTopic("openstarry", "again"))
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &cl) == nil && cl.State == ClaimDone
	})
	col = mqtttest.Collect(t, m.URL(), "watch", true, ClaimTopic("openstarry", "again"))
	if owner, mine, err := c.Claim(ctx, "again"); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("claim of the copy: %s %v %v", owner, mine, err)
	}
	var last Claim
	wait.For(t, 10*time.Second, "dev-a's done claim retained again after the copy's claim", func() bool {
		ms := col.Messages(ClaimTopic("openstarry", "again"))
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &last) == nil && last.State == ClaimDone && last.Device == "dev-a"
	})
	if held, _ := c.Held(); held != 0 {
		t.Errorf("the device keeps %d claims after the copy", held)
	}
}

// TestClaimLoserRestoredByAThird: dev-a claims a task, dev-b claims a copy
// and loses. While dev-b's claim was the retained one (between its claim
// and the restore of dev-a's), a third device subscribed, took dev-b's
// claim for the holder, lost to it, and restored it: dev-b's claim is
// retained again. A further copy reaching dev-b must still be dev-a's
// (dev-b ran it otherwise: a task run twice, as `make fleet-sim` saw with
// many copies published again while devices were killed), and dev-b puts
// dev-a's claim back.
func TestClaimLoserRestoredByAThird(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	start := func(dev string) *Claims {
		c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: dev, Agent: "master",
			Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	a, b := start("dev-a"), start("dev-b")
	ctx := context.Background()
	const id = "t-chain"
	if owner, mine, err := a.Claim(ctx, id); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("dev-a: %s %v %v", owner, mine, err)
	}
	if owner, mine, err := b.Claim(ctx, id); err != nil || mine || owner != "dev-a" {
		t.Fatalf("dev-b, first copy: %s %v %v", owner, mine, err)
	}
	// The third device's restore of dev-b's claim.
	col := mqtttest.Collect(t, m.URL(), "watch", true, ClaimTopic("openstarry", id))
	stale, _ := json.Marshal(Claim{TaskID: id, Device: "dev-b", Agent: "master", State: ClaimRunning,
		Expires: time.Now().Add(time.Hour).UTC(), Nonce: "0123456789abcdef", Restore: true})
	if pub := col.Client.Publish(ClaimTopic("openstarry", id), 1, true, stale); !pub.WaitTimeout(10*time.Second) || pub.Error() != nil {
		t.Fatalf("the third device's restore: %v", pub.Error())
	}
	if owner, mine, err := b.Claim(ctx, id); err != nil || mine || owner != "dev-a" {
		t.Fatalf("dev-b, a copy after its claim was restored by a third device: %s %v %v (want dev-a's)", owner, mine, err)
	}
	var last Claim
	wait.For(t, 10*time.Second, "dev-a's claim retained again", func() bool {
		ms := col.Messages(ClaimTopic("openstarry", id))
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &last) == nil && last.Device == "dev-a"
	})
}

// BenchmarkClaim: Claim then Done of distinct fleet tasks, 64 at a time as
// a device's agent makes them under load, against a real Mosquitto; it
// reports the processor time of this process (the device's side) per task,
// the done claims published and their subscriptions ended included.
func BenchmarkClaim(b *testing.B) {
	benchClaims(b, claimBench{inFlight: 64, waitDone: true})
}

// claimBench is how benchClaims makes its claims.
type claimBench struct {
	nodelay  bool          // the hub with set_tcp_nodelay (as packaging/mosquitto/hub.conf)
	inFlight int           // at most that many claims at a time (0: no bound)
	every    time.Duration // a claim every so often (0: as fast as inFlight lets)
	waitDone bool          // count the done claims and their unsubscriptions too
}

// startBenchClaims starts claims against a Mosquitto without persistence
// (with set_tcp_nodelay when nodelay), closed when b ends, and makes a first
// claim.
func startBenchClaims(b *testing.B, nodelay bool) *Claims {
	opts := mqtttest.Options{NoPersistence: true}
	if nodelay {
		opts.Extra = []string{"set_tcp_nodelay true"}
	}
	m := mqtttest.StartMosquitto(b, opts)
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master", Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	if _, _, err := c.Claim(context.Background(), "warm"); err != nil {
		b.Fatal(err)
	}
	return c
}

// benchClaims claims b.N distinct fleet tasks against a real Mosquitto,
// each marked done once claimed, and reports the processor time of this
// process (the device's side) per task and the tasks per SUBSCRIBE and
// per UNSUBSCRIBE.
func benchClaims(b *testing.B, cfg claimBench) {
	c := startBenchClaims(b, cfg.nodelay)
	ctx := context.Background()
	var sem chan struct{}
	if cfg.inFlight > 0 {
		sem = make(chan struct{}, cfg.inFlight)
	}
	var tick <-chan time.Time
	if cfg.every > 0 {
		t := time.NewTicker(cfg.every)
		defer t.Stop()
		tick = t.C
	}
	var wg sync.WaitGroup
	cpu0 := processCPU()
	b.ResetTimer()
	for i := range b.N {
		if sem != nil {
			sem <- struct{}{}
		}
		if tick != nil {
			<-tick
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if sem != nil {
				defer func() { <-sem }()
			}
			id := "b-" + strconv.Itoa(i)
			if _, mine, err := c.Claim(ctx, id); err != nil || !mine {
				b.Error(id, mine, err)
				return
			}
			c.Done(id)
		}()
	}
	wg.Wait()
	// The done claims published and their subscriptions ended (at the end
	// of each claim's defence, DefendFor after it was won).
	for cfg.waitDone {
		if held, _ := c.Held(); held <= 1 { // "warm" stays
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/task")
	sub, unsub := c.Batches()
	b.ReportMetric(float64(b.N)/float64(max(sub, 1)), "tasks/SUBSCRIBE")
	b.ReportMetric(float64(b.N)/float64(max(unsub, 1)), "tasks/UNSUBSCRIBE")
}

// TestClaimAfterClose: a Claim of closed claims fails at once with
// ErrNoClaim (the caller asks again or stops), not at its 30 s timeout.
func TestClaimAfterClose(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	if _, mine, err := c.Claim(context.Background(), "before"); err != nil || !mine {
		t.Fatalf("before Close: %v %v", mine, err)
	}
	c.Close()
	done := make(chan error, 1)
	go func() { _, _, err := c.Claim(context.Background(), "after"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNoClaim) {
			t.Fatalf("after Close: %v, want ErrNoClaim", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Claim after Close still waits after 10s")
	}
}

// TestClaimsManyAtOnce: more claims at once than one SUBSCRIBE carries
// (maxBatch): every one is decided, in a few SUBSCRIBE packets.
func TestClaimsManyAtOnce(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{NoPersistence: true})
	c, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := c.Claim(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	const n = 2*maxBatch + 500
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, mine, err := c.Claim(context.Background(), "many-"+strconv.Itoa(i)); err != nil || !mine {
				errs <- fmt.Errorf("many-%d: %v %v", i, mine, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	sub, _ := c.Batches()
	t.Logf("%d claims at once in %d SUBSCRIBE packets", n, sub-1)
	if sub-1 < 3 || sub-1 > n/2 {
		t.Fatalf("%d claims at once in %d SUBSCRIBE packets: want at least 3 (at most %d topics each) and far fewer than claims", n, sub-1, maxBatch)
	}
}
