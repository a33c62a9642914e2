package mqtt_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/tool"
	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/testcert"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

const device = "dev1"

func testLog(t testing.TB) zerolog.Logger {
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
}

// agentUnderTest is a runtime on a real bbolt store wired to a Client.
type agentUnderTest struct {
	id     string
	dir    string
	rt     *agent.Runtime
	client *mqtt.Client
	store  *bbolt.Store
}

type agentOpts struct {
	id        string
	dir       string
	brokerURL string
	cfg       func(*mqtt.Config)
	maxQueue  int
	afterSave func(*agent.Snapshot)
	// beforeStart runs between the client's New and Start.
	beforeStart func(*mqtt.Client)
}

// startAgent starts a runtime and its MQTT client; the test's cleanup stops
// both.
func startAgent(t testing.TB, o agentOpts) *agentUnderTest {
	t.Helper()
	if o.id == "" {
		o.id = "a1"
	}
	if o.dir == "" {
		o.dir = t.TempDir()
	}
	cfg := mqtt.Config{Broker: o.brokerURL, Device: device, Agent: o.id, Version: "test", Log: testLog(t),
		MaxReconnectInterval: 2 * time.Second, MaxTaskBytes: 256 << 10}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	c, err := mqtt.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := bbolt.Open(filepath.Join(o.dir, "agents"), bbolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := brain.New(design.Brain{Provider: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	rt, err := agent.Start(context.Background(), agent.Config{
		AgentID: o.id, Store: st, Brain: b, Tools: tool.MustResolve("file_append", "sleep_ms"),
		ArtifactsDir: filepath.Join(o.dir, "artifacts"), Outbox: c, OnProgress: c.Progress,
		MaxQueue: o.maxQueue, Log: testLog(t), AfterSave: o.afterSave,
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &agentUnderTest{id: o.id, dir: o.dir, rt: rt, client: c, store: st}
	if o.beforeStart != nil {
		o.beforeStart(c)
	}
	if err := c.Start(context.Background(), rt); err != nil {
		a.stop()
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	return a
}

var stopMu sync.Mutex

func (a *agentUnderTest) stop() {
	stopMu.Lock()
	defer stopMu.Unlock()
	_ = a.rt.Stop(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_ = a.client.Close(ctx)
	cancel()
	_ = a.store.Close()
}

func (a *agentUnderTest) lines(t testing.TB, name string) []string {
	data, err := os.ReadFile(filepath.Join(a.dir, "artifacts", name))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// brokers runs f against a real Mosquitto and against the embedded broker.
func brokers(t *testing.T, f func(t *testing.T, url string)) {
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.StartMosquitto(t, mqtttest.Options{})
		f(t, m.URL())
	})
	t.Run("embedded", func(t *testing.T) {
		b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(), Log: testLog(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		f(t, b.URL())
	})
}

func task(id string, input any) []byte {
	b, _ := json.Marshal(map[string]any{"task_id": id, "type": "test", "input": input})
	return b
}

func sleepTask(id string, ms int) []byte {
	return task(id, map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": ms}}}})
}

func appendTask(id string) []byte {
	return task(id, map[string]any{"call": []map[string]any{{"tool": "file_append", "args": map[string]string{"file": "out.txt", "line": id}}}})
}

func publisher(t testing.TB, url string) paho.Client {
	t.Helper()
	pc := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("pub-%d", time.Now().UnixNano())).
		SetCleanSession(true).SetProtocolVersion(4).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(200 * time.Millisecond).SetMaxReconnectInterval(time.Second))
	if tok := pc.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher connect: %v", tok.Error())
	}
	t.Cleanup(func() { pc.Disconnect(50) })
	return pc
}

func TestMQTTTaskResultAndProgress(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		a := startAgent(t, agentOpts{brokerURL: url})
		tp := a.client.Topics()
		col := mqtttest.Collect(t, url, "observer", true, "openstarry/#")
		pub := publisher(t, url)

		mqtttest.Publish(t, pub, tp.Tasks, task("t1", "hello"))
		mqtttest.Publish(t, pub, tp.Tasks, sleepTask("t2", 10))
		wait.For(t, 10*time.Second, "two results", func() bool { return len(mqtttest.Results(t, col, tp.Results)) == 2 })
		rs := mqtttest.Results(t, col, tp.Results)
		if r := rs["t1"][0]; r.Status != "done" || string(r.Output) != `"hello"` || r.AgentID != "a1" || r.TickIndex == 0 {
			t.Errorf("t1 result: %+v", r)
		}
		if r := rs["t2"][0]; r.Status != "done" || !strings.Contains(string(r.Output), "slept_ms") {
			t.Errorf("t2 result: %+v", r)
		}
		wait.For(t, 5*time.Second, "progress", func() bool {
			for _, m := range col.Messages(tp.Progress) {
				var p struct {
					TaskID  string `json:"task_id"`
					Percent *int   `json:"progress_percent"`
					Phase   string `json:"phase"`
				}
				if json.Unmarshal(m.Payload, &p) == nil && p.TaskID == "t2" && p.Percent != nil && p.Phase == "tool:sleep_ms" {
					return true
				}
			}
			return false
		})
		// A task's "done" report waits for its result and goes out just
		// before it (Progress), never after it or not at all.
		for _, id := range []string{"t1", "t2"} {
			done, result := -1, -1
			wait.For(t, 5*time.Second, id+`'s "done" report`, func() bool {
				done, result = -1, -1
				for i, m := range col.Messages("") {
					var p struct {
						TaskID string `json:"task_id"`
						Phase  string `json:"phase"`
					}
					if json.Unmarshal(m.Payload, &p) != nil || p.TaskID != id {
						continue
					}
					if m.Topic == tp.Progress && p.Phase == "done" && done < 0 {
						done = i
					}
					if m.Topic == tp.Results && result < 0 {
						result = i
					}
				}
				return done >= 0 && result >= 0
			})
			if done > result {
				t.Errorf(`%s: the "done" report came after the result (messages %d and %d)`, id, done, result)
			}
		}
		// Confirmed results leave the outbox.
		wait.For(t, 5*time.Second, "an empty outbox", func() bool {
			s, err := a.rt.Snapshot(context.Background())
			return err == nil && len(s.Outbox) == 0
		})
		// The status is online and retained.
		late := mqtttest.Collect(t, url, "late", true, tp.Status)
		wait.For(t, 5*time.Second, "retained online status", func() bool {
			for _, m := range late.Messages(tp.Status) {
				if m.Retained && strings.Contains(string(m.Payload), `"state":"online"`) && strings.Contains(string(m.Payload), `"agents":["a1"]`) {
					return true
				}
			}
			return false
		})
		if st := a.client.Stats(); st.Accepted != 2 || st.Published < 2 {
			t.Errorf("stats %+v", st)
		}
		// A clean stop marks the device offline (retained).
		a.stop()
		wait.For(t, 5*time.Second, "offline status", func() bool {
			ms := late.Messages(tp.Status)
			return len(ms) > 0 && strings.Contains(string(ms[len(ms)-1].Payload), `"state":"offline"`)
		})
	})
}

func TestMQTTDeadLetters(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		a := startAgent(t, agentOpts{brokerURL: url})
		tp := a.client.Topics()
		col := mqtttest.Collect(t, url, "observer", true, tp.DeadLetter, tp.Results)
		pub := publisher(t, url)

		// Over the agent's 256 KiB, under the embedded broker's 1 MiB
		// packet bound (a larger packet the broker itself refuses).
		big := task("big", strings.Repeat("x", 512<<10))
		for _, p := range [][]byte{[]byte("{not json"), []byte(`{"type":"x","input":"no id"}`), big, []byte{0xff, 0xfe, 0x00}} {
			mqtttest.Publish(t, pub, tp.Tasks, p)
		}
		mqtttest.Publish(t, pub, tp.Tasks, task("after", "still serving"))
		wait.For(t, 10*time.Second, "the next task's result", func() bool { return len(mqtttest.Results(t, col, tp.Results)["after"]) > 0 })
		wait.For(t, 10*time.Second, "four dead letters", func() bool { return len(col.Messages(tp.DeadLetter)) == 4 })
		codes := map[string]map[string]any{}
		for _, m := range col.Messages(tp.DeadLetter) {
			var dl map[string]any
			if err := json.Unmarshal(m.Payload, &dl); err != nil {
				t.Fatalf("dead letter is not JSON: %s", m.Payload)
			}
			codes[dl["code"].(string)+fmt.Sprint(dl["payload_encoding"])] = dl
			if dl["reason"] == "" || dl["topic"] != tp.Tasks {
				t.Errorf("dead letter without reason or topic: %v", dl)
			}
		}
		for _, want := range []string{"bad_jsonutf-8", "missing_task_idutf-8", "too_largeutf-8", "bad_jsonbase64"} {
			if codes[want] == nil {
				t.Errorf("no dead letter %s among %v", want, codes)
			}
		}
		if dl := codes["too_largeutf-8"]; dl != nil {
			if dl["truncated"] != true || dl["payload_bytes"].(float64) != float64(len(big)) || len(dl["payload"].(string)) > 4096 {
				t.Errorf("oversized dead letter: truncated=%v bytes=%v len=%d", dl["truncated"], dl["payload_bytes"], len(dl["payload"].(string)))
			}
		}
		if st := a.client.Stats(); st.DeadLettered != 4 || st.Accepted != 1 {
			t.Errorf("stats %+v", st)
		}
	})
}

func TestMQTTDuplicateRunsOnce(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		a := startAgent(t, agentOpts{brokerURL: url})
		tp := a.client.Topics()
		col := mqtttest.Collect(t, url, "observer", true, tp.Results)
		pub := publisher(t, url)
		mqtttest.Publish(t, pub, tp.Tasks, appendTask("dup"))
		mqtttest.Publish(t, pub, tp.Tasks, appendTask("dup"))
		wait.For(t, 10*time.Second, "the result", func() bool { return len(mqtttest.Results(t, col, tp.Results)["dup"]) > 0 })
		// Again once it is done: acknowledged, not run, its result published again.
		mqtttest.Publish(t, pub, tp.Tasks, appendTask("dup"))
		wait.For(t, 10*time.Second, "the republished result", func() bool { return len(mqtttest.Results(t, col, tp.Results)["dup"]) >= 2 })
		wait.Settle(t, 200*time.Millisecond, "a second run of the task would have appended its line by now")
		if got := a.lines(t, "out.txt"); len(got) != 1 {
			t.Fatalf("the task ran %d times: %v", len(got), got)
		}
		ticks := map[uint64]bool{}
		for _, r := range mqtttest.Results(t, col, tp.Results)["dup"] {
			ticks[r.TickIndex] = true
		}
		if len(ticks) != 1 {
			t.Fatalf("results of more than one run: %v", ticks)
		}
		if st := a.client.Stats(); st.Accepted != 1 || st.Duplicates != 2 {
			t.Errorf("stats %+v", st)
		}
	})
}

// TestMQTTBrokerRestart: the broker goes away while tasks run; their
// results wait and are all delivered after the reconnection, none lost.
func TestMQTTBrokerRestart(t *testing.T) {
	const n = 20
	run := func(t *testing.T, url string, down, up func()) {
		a := startAgent(t, agentOpts{brokerURL: url})
		tp := a.client.Topics()
		col := mqtttest.Collect(t, url, "observer-"+t.Name(), false, tp.Results)
		pub := publisher(t, url)
		for i := range n {
			mqtttest.Publish(t, pub, tp.Tasks, sleepTask(fmt.Sprintf("r%02d", i), 40))
		}
		wait.For(t, 10*time.Second, "all tasks durable", func() bool { return a.client.Stats().Accepted == n })
		// An outage of half a second at least, in which results pile up.
		// (The embedded broker started again within tens of milliseconds
		// of its Close loses results the observer's persistent session
		// should receive: a shorter outage makes this test fail.)
		outage := time.After(500 * time.Millisecond)
		down()
		wait.For(t, 10*time.Second, "a result waiting in the outbox while the broker is down", func() bool {
			s, err := a.rt.Snapshot(context.Background())
			return err == nil && len(s.Outbox) > 0
		})
		<-outage
		up()
		for i := n; i < n+5; i++ {
			mqtttest.Publish(t, pub, tp.Tasks, sleepTask(fmt.Sprintf("r%02d", i), 1))
		}
		wait.For(t, 30*time.Second, "every result", func() bool { return len(mqtttest.Results(t, col, tp.Results)) == n+5 })
		wait.For(t, 10*time.Second, "an empty outbox", func() bool {
			s, err := a.rt.Snapshot(context.Background())
			return err == nil && len(s.Outbox) == 0
		})
		ranOnce(t, mqtttest.Results(t, col, tp.Results))
	}
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.StartMosquitto(t, mqtttest.Options{})
		run(t, m.URL(), m.Kill, m.Start)
	})
	t.Run("embedded", func(t *testing.T) {
		dir := t.TempDir()
		start := func(listen string) *broker.Broker {
			b, err := broker.Start(context.Background(), broker.Config{Listen: listen, DataDir: dir, Log: testLog(t)})
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		b := start("127.0.0.1:0")
		addr := b.Addr().String()
		t.Cleanup(func() { b.Close() })
		run(t, b.URL(), func() { b.Close() }, func() {
			b = start(addr)
		})
	})
}

// TestMQTTResultsWaitForTheBroker: results produced while the broker was
// never reachable are delivered, in order, once it appears.
func TestMQTTResultsWaitForTheBroker(t *testing.T) {
	port := loopback.FreePort(t)
	url := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	a := startAgent(t, agentOpts{brokerURL: url})
	for i := range 5 {
		ev, _ := agent.TaskEvent(&agent.Task{TaskID: fmt.Sprintf("h%d", i), Input: json.RawMessage(`"x"`)}, "http", 0)
		if res := a.rt.Submit(context.Background(), ev); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	wait.For(t, 5*time.Second, "five results in the outbox", func() bool {
		s, _ := a.rt.Snapshot(context.Background())
		return s != nil && len(s.Outbox) == 5
	})
	b, err := broker.Start(context.Background(), broker.Config{Listen: fmt.Sprintf("127.0.0.1:%d", port), Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A persistent observer session exists before the agent connects: the
	// broker must not drop what the agent publishes right after connecting.
	col := mqtttest.Collect(t, url, "observer", false, a.client.Topics().Results)
	// Delivery is at least once: a result whose acknowledgement was lost
	// in a reconnection is published again. The first publication of each
	// result comes in order.
	var order []string
	firsts := func() []string {
		order = order[:0]
		seen := map[string]bool{}
		for _, m := range col.Messages("") {
			var r mqtttest.Result
			_ = json.Unmarshal(m.Payload, &r)
			if !seen[r.TaskID] {
				seen[r.TaskID] = true
				order = append(order, r.TaskID)
			}
		}
		return order
	}
	wait.For(t, 20*time.Second, "five results", func() bool { return len(firsts()) >= 5 })
	if strings.Join(order, ",") != "h0,h1,h2,h3,h4" {
		t.Errorf("results out of order: %v", order)
	}
	wait.For(t, 5*time.Second, "an empty outbox", func() bool {
		s, _ := a.rt.Snapshot(context.Background())
		return s != nil && len(s.Outbox) == 0
	})
}

func TestMQTTStartErrors(t *testing.T) {
	dir := t.TempDir()
	pw := mqtttest.PasswordFile(t, dir, map[string]string{"dev1": "right"})
	m := mqtttest.StartMosquitto(t, mqtttest.Options{PasswordFile: pw})
	start := func(cfg mqtt.Config) error {
		cfg.Device, cfg.Agent, cfg.Log = device, "a1", testLog(t)
		c, err := mqtt.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		return c.Start(context.Background(), nopRuntime{})
	}
	err := start(mqtt.Config{Broker: m.URL(), Username: "dev1", Password: "wrong"})
	if !errors.Is(err, mqtt.ErrBadCredentials) && !errors.Is(err, mqtt.ErrNotAuthorized) {
		t.Errorf("wrong password: %v", err)
	}
	if err := start(mqtt.Config{Broker: m.URL(), Username: "dev1", Password: "right"}); err != nil {
		t.Errorf("right password: %v", err)
	}

	certs := testcert.Write(t, dir, "good")
	other := testcert.Write(t, dir, "other")
	tm := mqtttest.StartMosquitto(t, mqtttest.Options{TLS: &certs})
	if err := start(mqtt.Config{Broker: tm.URL(), CAFile: other.CA}); !errors.Is(err, mqtt.ErrTLS) {
		t.Errorf("unknown CA: %v", err)
	}
	if err := start(mqtt.Config{Broker: tm.URL(), CAFile: certs.CA}); err != nil {
		t.Errorf("right CA: %v", err)
	}

	// Configuration errors come from New.
	for _, cfg := range []mqtt.Config{
		{Broker: "http://x", Device: device, Agent: "a"},
		{Broker: "tcp://x", Device: "bad/dev", Agent: "a"},
		{Broker: "tcp://x", Device: device, Agent: "a", TopicPrefix: "a/#"},
		{Broker: "tcp://x", Device: device, Agent: "a", CAFile: certs.CA},
		{Broker: "ssl://x", Device: device, Agent: "a", CAFile: filepath.Join(dir, "missing.pem")},
		{Broker: "ssl://x", Device: device, Agent: "a", CertFile: certs.Cert},
	} {
		if _, err := mqtt.New(cfg); err == nil {
			t.Errorf("New accepted %+v", cfg)
		}
	}
}

type nopRuntime struct{}

func (nopRuntime) SubmitAsync(_ context.Context, _ agent.Event, done func(agent.SubmitResult)) {
	done(agent.SubmitResult{})
}
func (nopRuntime) Confirm(uint64) {}

func TestMQTTParseBrokerURL(t *testing.T) {
	for raw, want := range map[string]string{
		"tcp://h":          "tcp://h:1883",
		"mqtt://h:1884":    "mqtt://h:1884",
		"ssl://h":          "ssl://h:8883",
		"mqtts://10.0.0.1": "mqtts://10.0.0.1:8883",
		"tcp://[::1]":      "tcp://[::1]:1883",
	} {
		u, _, err := mqtt.ParseBrokerURL(raw)
		if err != nil || u.String() != want {
			t.Errorf("ParseBrokerURL(%s) = %v, %v; want %s", raw, u, err, want)
		}
	}
	for _, raw := range []string{"", "h:1883", "ws://h", "tcp://", "tcp://h/path"} {
		if _, _, err := mqtt.ParseBrokerURL(raw); err == nil {
			t.Errorf("ParseBrokerURL(%q) accepted", raw)
		}
	}
}

func TestMQTTSendTask(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	startAgent(t, agentOpts{brokerURL: b.URL()})
	o := mqtt.SendOptions{Broker: b.URL(), Device: device, Agent: "a1", Wait: true, Timeout: 10 * time.Second}
	res, err := mqtt.SendTask(context.Background(), o, task("s1", "hi"))
	if err != nil {
		t.Fatal(err)
	}
	var r mqtttest.Result
	if json.Unmarshal(res, &r) != nil || r.TaskID != "s1" || string(r.Output) != `"hi"` {
		t.Fatalf("result %s", res)
	}
	// The same id again: not run twice, its result comes back.
	res, err = mqtt.SendTask(context.Background(), o, task("s1", "hi"))
	if err != nil || !strings.Contains(string(res), `"task_id":"s1"`) {
		t.Fatalf("resend: %s %v", res, err)
	}
	o.Fleet, o.Agent = true, ""
	if res, err = mqtt.SendTask(context.Background(), o, task("s2", "fleet")); err != nil || !strings.Contains(string(res), `"fleet"`) {
		t.Fatalf("fleet: %s %v", res, err)
	}
	o.Timeout = 300 * time.Millisecond
	o.Fleet, o.Agent = false, "nobody"
	if _, err := mqtt.SendTask(context.Background(), o, task("s3", "x")); !errors.Is(err, mqtt.ErrNoResult) {
		t.Fatalf("no agent: %v", err)
	}
}

// TestMQTTSendFleetRepublish: a fleet task no device claims is published
// again every Republish until Timeout, and the sender is told; one whose
// claim is retained already is published once and returns at once; a
// negative Republish publishes once.
func TestMQTTSendFleetRepublish(t *testing.T) {
	b, err := broker.Start(context.Background(), broker.Config{Listen: "127.0.0.1:0", Log: testLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	col := mqtttest.Collect(t, b.URL(), "fleet-copies", true, mqtt.FleetTopic("openstarry"))
	copies := func(id string) int {
		n := 0
		for _, m := range col.Messages("") {
			if strings.Contains(string(m.Payload), `"task_id":"`+id+`"`) {
				n++
			}
		}
		return n
	}
	var mu sync.Mutex
	var notices []string
	o := mqtt.SendOptions{Broker: b.URL(), Fleet: true, Timeout: 3 * time.Second, Republish: 200 * time.Millisecond,
		Notice: func(m string) { mu.Lock(); notices = append(notices, m); mu.Unlock() }}
	if _, err := mqtt.SendTask(context.Background(), o, task("r1", "x")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the copies to arrive", func() bool { return copies("r1") >= 3 })
	mu.Lock()
	got := strings.Join(notices, "\n")
	mu.Unlock()
	if !strings.Contains(got, "fleet task r1 was not claimed within 200ms: published") || !strings.Contains(got, "not claimed by any device within 3s") {
		t.Fatalf("notices: %q", got)
	}

	// Claimed already (a retained claim): published once.
	pc, err := mqtt.Dial(context.Background(), mqtt.DialOptions{Broker: b.URL(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Disconnect(10)
	if tok := pc.Publish(mqtt.FleetClaimTopic("openstarry", "r2"), 1, true,
		`{"task_id":"r2","device":"d1","state":"running","expires":"2099-01-01T00:00:00Z","nonce":"1"}`); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	o.Timeout = time.Minute
	start := time.Now()
	if _, err := mqtt.SendTask(context.Background(), o, task("r2", "x")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("a claimed task kept its sender %s", took)
	}
	o.Republish, o.Timeout = -1, 2*time.Second
	if _, err := mqtt.SendTask(context.Background(), o, task("r3", "x")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "r2 and r3 to arrive", func() bool { return copies("r2") >= 1 && copies("r3") >= 1 })
	wait.Settle(t, 600*time.Millisecond, "a copy of r2 or r3 would be here by now")
	if copies("r2") != 1 || copies("r3") != 1 {
		t.Fatalf("r2 published %d times, r3 %d: want once each", copies("r2"), copies("r3"))
	}
}

// TestMQTTSendFleetClaimsUnreadable: on a Mosquitto whose ACL lets the
// sender publish fleet tasks but not read the claims, Mosquitto accepts the
// subscription to the claim topic and delivers nothing on it (it does not
// refuse it in the SUBACK): the task looks unclaimed, so the sender
// publishes it every Republish until Timeout, then says it was not claimed.
func TestMQTTSendFleetClaimsUnreadable(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(acl, []byte("topic readwrite openstarry/fleet/tasks\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"acl_file " + acl}})
	col := mqtttest.Collect(t, m.URL(), "fleet-copies", true, mqtt.FleetTopic("openstarry"))
	var notices []string
	var mu sync.Mutex
	o := mqtt.SendOptions{Broker: m.URL(), Fleet: true, Timeout: 4 * time.Second, Republish: 500 * time.Millisecond,
		Notice: func(s string) { mu.Lock(); notices = append(notices, s); mu.Unlock() }}
	if _, err := mqtt.SendTask(context.Background(), o, task("q1", "x")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the copies", func() bool { return len(col.Messages("")) >= 2 })
	wait.Settle(t, 600*time.Millisecond, "a late copy would be here by now")
	mu.Lock()
	defer mu.Unlock()
	if n := len(col.Messages("")); n < 2 || n > 9 || !strings.Contains(strings.Join(notices, "\n"), "fleet task q1 published, not claimed by any device within 4s") {
		t.Fatalf("%d copies (want 2 to 9: one every 500ms for at most 4s), notices %q", n, notices)
	}
}

// An echo task is answered microseconds after its tick starts: its
// "thinking" report is still waiting when "done" comes and is replaced by
// it, so that fifty sequential tasks do not publish a hundred reports (they
// did: one PUBLISH through the broker each).
func TestProgressOfQuickTasksCoalesced(t *testing.T) {
	brokers(t, func(t *testing.T, url string) {
		a := startAgent(t, agentOpts{brokerURL: url})
		tp := a.client.Topics()
		col := mqtttest.Collect(t, url, "observer", true, tp.Progress, tp.Results)
		pub := publisher(t, url)
		const n = 50
		for i := range n {
			mqtttest.Publish(t, pub, tp.Tasks, task(fmt.Sprintf("q%d", i), "hello"))
			wait.For(t, 10*time.Second, "the result", func() bool { return len(mqtttest.Results(t, col, tp.Results)) == i+1 })
		}
		phases := map[string]int{}
		wait.For(t, 10*time.Second, "a done report for every task", func() bool {
			clear(phases)
			for _, m := range col.Messages(tp.Progress) {
				var p struct{ Phase string }
				if json.Unmarshal(m.Payload, &p) == nil {
					phases[p.Phase]++
				}
			}
			return phases["done"] == n
		})
		if phases["thinking"] == n {
			t.Fatalf("every task published its thinking report too: %v", phases)
		}
		t.Logf("progress reports of %d sequential tasks: %v", n, phases)
	})
}

// ranOnce fails t for a task whose results (published once or more) come
// from more than one run (tick).
func ranOnce(t *testing.T, results map[string][]mqtttest.Result) {
	t.Helper()
	for id, rs := range results {
		ticks := map[uint64]bool{}
		for _, r := range rs {
			ticks[r.TickIndex] = true
		}
		if len(ticks) != 1 {
			t.Errorf("task %s ran more than once: %v", id, rs)
		}
	}
}
