package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// gateProxy is a TCP proxy between one MQTT client and a broker whose two
// directions a test holds back and lets go: in each, a packet for which
// the direction's block function says true waits, with every packet behind
// it (they keep their order), until the function changes. Kill closes the
// connections without a DISCONNECT and refuses new ones: to the broker the
// client died as under SIGKILL, and nothing the client does after reaches
// the broker.
type gateProxy struct {
	ln       net.Listener
	mu       sync.Mutex
	down, up gate // broker to client, client to broker
	conns    []net.Conn
	killed   bool
}

// gate is one direction of a gateProxy (its mu guards it).
type gate struct {
	block func(pk []byte) bool
	q     [][]byte
	w     net.Conn
}

func startGateProxy(t *testing.T, brokerURL string) *gateProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &gateProxy{ln: ln}
	t.Cleanup(p.Kill)
	relayTo(ln, brokerURL, func(cc, bc net.Conn) bool {
		p.mu.Lock()
		if p.killed {
			p.mu.Unlock()
			cc.Close()
			bc.Close()
			return false
		}
		p.conns = append(p.conns, cc, bc)
		p.down.w, p.up.w, p.down.q, p.up.q = cc, bc, nil, nil
		p.mu.Unlock()
		go p.copy(bc, &p.down)
		go p.copy(cc, &p.up)
		return true
	})
	return p
}

func (p *gateProxy) URL() string { return "tcp://" + p.ln.Addr().String() }

// copy reads packets from r and passes them through g.
func (p *gateProxy) copy(r net.Conn, g *gate) {
	br := bufio.NewReader(r)
	for {
		pk, err := mqtttest.ReadPacket(br)
		if err != nil {
			p.Kill()
			return
		}
		p.mu.Lock()
		g.q = append(g.q, pk)
		p.flush(g)
		p.mu.Unlock()
	}
}

// flush writes what g's block lets through (p.mu held).
func (p *gateProxy) flush(g *gate) {
	for len(g.q) > 0 && !p.killed && (g.block == nil || !g.block(g.q[0])) {
		_, _ = g.w.Write(g.q[0])
		g.q = g.q[1:]
	}
}

// Hold sets what is held back towards the client (down) and towards the
// broker (up); nil lets everything through.
func (p *gateProxy) Hold(down, up func(pk []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down.block, p.up.block = down, up
	p.flush(&p.down)
	p.flush(&p.up)
}

// HeldDown returns how many packets wait on their way to the client.
func (p *gateProxy) HeldDown() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.down.q)
}

// Kill closes everything, with nothing more passed either way.
func (p *gateProxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
}

// publishTo matches the PUBLISH packets of topics under prefix (and, when
// marker is not empty, whose bytes contain it).
func publishTo(prefix, marker string) func(pk []byte) bool {
	return func(pk []byte) bool {
		return pk[0]>>4 == 3 && strings.HasPrefix(publishTopic(pk), prefix) &&
			(marker == "" || bytes.Contains(pk, []byte(marker)))
	}
}

// TestClaimRaceLoserKilled: the two windows docs/fleet.md left open.
// dev-a and dev-b claim one task within a round trip of each other, both
// after a look at the topic that found nothing retained: dev-a's claim
// reaches the hub first and wins, dev-b's comes second and, retained being
// the last one written, overwrites it. Then dev-b is killed (its
// connection closed without a DISCONNECT, nothing more of it reaching the
// hub):
//
//   - "unseen": before its own claim came back to it (it never learnt that
//     it lost);
//   - "lost": after it learnt it lost, before its restore of dev-a's claim
//     reached the hub.
//
// Restarted, dev-b gets a copy of the task again (the task message it had
// not acknowledged is still in its session) and finds its own claim
// retained: it ran the task, a second run of it fleet-wide. Now dev-a,
// which holds the task, puts its claim back when another's comes over it,
// and a device that finds a claim of its own that it did not make in this
// run claims again and waits for the holder to answer before it runs the
// task. Each window twice: dev-b restarts after dev-a put its claim back
// ("restored"), and before (dev-a's connection holds the claims back until
// dev-b's new claim is on the hub). On Mosquitto and on the embedded
// broker.
func TestClaimRaceLoserKilled(t *testing.T) {
	brokers := map[string]func(t *testing.T) string{
		"mosquitto": func(t *testing.T) string { return mqtttest.StartMosquitto(t, mqtttest.Options{}).URL() },
		"embedded": func(t *testing.T) string {
			b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b.URL()
		},
	}
	for _, name := range []string{"mosquitto", "embedded"} {
		for _, killed := range []string{"unseen", "lost"} {
			for _, restored := range []bool{true, false} {
				label := name + "/" + killed + "/restart-before-restore"
				if restored {
					label = name + "/" + killed + "/restored"
				}
				t.Run(label, func(t *testing.T) { claimRaceLoserKilled(t, brokers[name](t), killed == "lost", restored) })
			}
		}
	}
}

func claimRaceLoserKilled(t *testing.T, url string, decided, restored bool) {
	start := func(dev, broker string) *Claims {
		c, err := StartClaims(ClaimsConfig{Broker: broker, Prefix: "openstarry", Device: dev, Agent: "master",
			Grace: 25 * time.Second, Log: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	const id = "t-race"
	topic := ClaimTopic("openstarry", id)
	claims := publishTo("openstarry/fleet/claims/", "")
	col := mqtttest.Collect(t, url, "watch", true, topic)
	// claimsOf returns the claims published so far (not the retained
	// ones the watcher got when it subscribed).
	claimsOf := func() []Claim {
		var out []Claim
		for _, m := range col.Messages(topic) {
			var cl Claim
			if !m.Retained && json.Unmarshal(m.Payload, &cl) == nil {
				out = append(out, cl)
			}
		}
		return out
	}

	pa, pb := startGateProxy(t, url), startGateProxy(t, url)
	// dev-b's barrier message is held back: it has looked at the topic
	// (nothing retained), not claimed yet.
	pb.Hold(publishTo("openstarry/dev-b/claims/barrier/", ""), nil)
	a, b := start("dev-a", pa.URL()), start("dev-b", pb.URL())
	ctx := context.Background()
	type result struct {
		owner string
		mine  bool
		err   error
	}
	rb := make(chan result, 1)
	go func() {
		owner, mine, err := b.Claim(ctx, id)
		rb <- result{owner, mine, err}
	}()
	wait.For(t, 20*time.Second, "dev-b's barrier held back", func() bool { return pb.HeldDown() > 0 })
	if owner, mine, err := a.Claim(ctx, id); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("dev-a: %s %v %v", owner, mine, err)
	}
	if !restored {
		// dev-a sees no claim until dev-b has restarted and claimed again.
		pa.Hold(claims, nil)
	}
	// dev-b's barrier goes through; dev-a's claim and its own, behind it,
	// do not: it claims.
	pb.Hold(claims, nil)
	var stale Claim
	defer func() {
		if t.Failed() {
			t.Logf("claims: %+v; held for dev-b %d", claimsOf(), pb.HeldDown())
		}
	}()
	wait.For(t, 20*time.Second, "dev-b's claim on the hub, after dev-a's", func() bool {
		cs := claimsOf()
		for i, cl := range cs {
			if cl.Device == "dev-b" && !cl.Restore && i > 0 && cs[0].Device == "dev-a" {
				stale = cl
				return true
			}
		}
		return false
	})
	if decided {
		// dev-b sees both claims and loses; its restore of dev-a's claim
		// never leaves it.
		pb.Hold(nil, publishTo("openstarry/fleet/claims/", `"restore":true`))
		select {
		case r := <-rb:
			if r.err != nil || r.mine || r.owner != "dev-a" {
				t.Fatalf("dev-b: %+v, want dev-a's", r)
			}
		case <-time.After(40 * time.Second):
			t.Fatal("dev-b did not decide")
		}
	}
	pb.Kill()

	if restored {
		wait.For(t, 20*time.Second, "dev-a's claim put back over dev-b's", func() bool {
			cs := claimsOf()
			return len(cs) > 0 && cs[len(cs)-1].Device == "dev-a" && cs[len(cs)-1].Restore
		})
	}
	// dev-b restarts, and a copy of the task reaches it.
	b2 := start("dev-b", url)
	rb2 := make(chan result, 1)
	go func() {
		owner, mine, err := b2.Claim(ctx, id)
		rb2 <- result{owner, mine, err}
	}()
	if !restored {
		// dev-b claims again (a claim of its own it did not make in this
		// run is retained), or decides without: on the version before,
		// it found its own claim and ran the task.
		wait.For(t, 40*time.Second, "dev-b's new claim, or its decision", func() bool {
			for _, cl := range claimsOf() {
				if cl.Device == "dev-b" && !cl.Restore && cl.Nonce != stale.Nonce {
					return true
				}
			}
			return len(rb2) > 0
		})
		pa.Hold(nil, nil)
	}
	select {
	case r := <-rb2:
		if r.err != nil || r.mine || r.owner != "dev-a" {
			t.Fatalf("dev-b restarted, a copy of dev-a's task: owner %q, mine %v, %v; want dev-a's (dev-b ran the task a second time)", r.owner, r.mine, r.err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dev-b restarted: no decision in 60s")
	}
	if !restored {
		probed := false
		for _, cl := range claimsOf() {
			probed = probed || (cl.Device == "dev-b" && !cl.Restore && cl.Nonce != stale.Nonce)
		}
		if !probed {
			t.Error("dev-b restarted decided without claiming again, dev-a's claim not yet back")
		}
	}
	if a.Restores() == 0 {
		t.Error("dev-a never put its claim back")
	}
	look := mqtttest.Collect(t, url, "look", true, topic)
	var last Claim
	wait.For(t, 20*time.Second, "dev-a's claim retained", func() bool {
		ms := look.Messages(topic)
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &last) == nil && last.Device == "dev-a"
	})
	// dev-a still holds the task: a copy reaching it is its own.
	if owner, mine, err := a.Claim(ctx, id); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("dev-a, a copy: %s %v %v", owner, mine, err)
	}
}

// TestClaimDefendedAfterDone: dev-a wins a task, runs it at once and is
// done, and only then does the claim dev-b made within a round trip of
// dev-a's reach the hub, overwriting dev-a's claim (dev-b, killed before it
// saw it come back, never restores dev-a's). dev-a defends a claim for
// DefendFor after it won it, done or not, and its done claim goes only
// then (here at Close): what the hub keeps in the end is dev-a's done
// claim. (dev-a's done claim went at once, and dev-b's running claim
// stayed retained: restarted, dev-b found its own claim and ran the task.)
func TestClaimDefendedAfterDone(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	a, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "dev-a", Agent: "master",
		DefendFor: time.Hour, Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	const id = "t-quick"
	topic := ClaimTopic("openstarry", id)
	if owner, mine, err := a.Claim(context.Background(), id); err != nil || !mine || owner != "dev-a" {
		t.Fatalf("dev-a: %s %v %v", owner, mine, err)
	}
	a.Done(id)
	col := mqtttest.Collect(t, m.URL(), "watch", true, topic)
	late, _ := json.Marshal(Claim{TaskID: id, Device: "dev-b", Agent: "master", State: ClaimRunning,
		Expires: time.Now().Add(time.Hour).UTC(), Nonce: "0123456789abcdef"})
	if pub := col.Client.Publish(topic, 1, true, late); !pub.WaitTimeout(10*time.Second) || pub.Error() != nil {
		t.Fatalf("dev-b's claim: %v", pub.Error())
	}
	wait.For(t, 20*time.Second, "dev-a's claim put back over dev-b's", func() bool { return a.Restores() == 1 })
	a.Close()
	look := mqtttest.Collect(t, m.URL(), "look", true, topic)
	var last Claim
	wait.For(t, 20*time.Second, "dev-a's done claim retained", func() bool {
		ms := look.Messages(topic)
		return len(ms) > 0 && json.Unmarshal(ms[len(ms)-1].Payload, &last) == nil && last.Device == "dev-a" && last.State == ClaimDone
	})
}

// FuzzDecodeClaim: whatever a claim topic carries, decodeClaim does not
// panic, and a claim it accepts names the topic's task and a device, and
// holds no longer than its state's TTL.
func FuzzDecodeClaim(f *testing.F) {
	f.Add("t-1", []byte(`{"task_id":"t-1","device":"d","agent":"master","state":"running","expires":"2099-01-01T00:00:00Z","nonce":"x"}`))
	f.Add("t-1", []byte(`{"task_id":"t-1","device":"d","state":"done","expires":"2000-01-01T00:00:00Z","restore":true}`))
	f.Add("t-2", []byte(`{"task_id":"t-1","device":"d"}`))
	f.Add("t-1", []byte(`{"task_id":"t-1","device":""}`))
	f.Add("t-1", []byte(`{"expires":"not a time"}`))
	f.Add("", []byte(`null`))
	f.Fuzz(func(t *testing.T, taskID string, payload []byte) {
		now := time.Now()
		cl, ok := decodeClaim(taskID, payload, now, time.Hour, 24*time.Hour)
		if !ok {
			return
		}
		if cl.TaskID != taskID || cl.Device == "" {
			t.Fatalf("accepted %+v for task %q", cl, taskID)
		}
		if cl.Expires.After(now.Add(24 * time.Hour)) {
			t.Fatalf("holds until %v, beyond the TTL", cl.Expires)
		}
	})
}
