package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/testcert"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// The MQTT acceptance tests run the real binary against a real Mosquitto
// started by the test (and against the broker the binary embeds).

const mqttDevice = "dev1"

var brokerLineRe = regexp.MustCompile(`embedded broker listening on ([0-9.]+:[0-9]+)`)

// runAgentMQTT starts `openstarry run` for agentID on data with extra args
// and waits until it is subscribed to its task topic.
func runAgentMQTT(t *testing.T, agentID, data string, extra ...string) *child {
	t.Helper()
	args := append([]string{"run", "--agent", agentID, "--device", mqttDevice, "--listen", "127.0.0.1:0", "--data", data}, extra...)
	c := startChild(t, true, args...)
	c.url()
	device := mqttDevice
	for i, a := range extra {
		if a == "--device" && i+1 < len(extra) {
			device = extra[i+1]
		}
	}
	c.waitLog("subscribed to openstarry/"+device+"/agents/"+agentID+"/tasks", 20*time.Second)
	return c
}

// embeddedURL is the client URL of the broker a child embeds.
func embeddedURL(t *testing.T, c *child) string {
	t.Helper()
	m := brokerLineRe.FindStringSubmatch(c.logs())
	if m == nil {
		t.Fatalf("no embedded broker line\n%s", c.logs())
	}
	return "tcp://" + m[1]
}

func tasksTopic(agentID string) string {
	return "openstarry/" + mqttDevice + "/agents/" + agentID + "/tasks"
}

func resultsTopic(agentID string) string {
	return "openstarry/" + mqttDevice + "/agents/" + agentID + "/results"
}

// runs counts the executions behind a task's results: one (agent, tick)
// pair per execution; a republished result repeats its pair.
func runs(rs []mqtttest.Result) int {
	seen := map[string]bool{}
	for _, r := range rs {
		seen[fmt.Sprintf("%s@%d", r.AgentID, r.TickIndex)] = true
	}
	return len(seen)
}

func mqttPublisher(t *testing.T, url string) paho.Client {
	t.Helper()
	pc := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("test-pub-%d", time.Now().UnixNano())).
		SetCleanSession(true).SetProtocolVersion(4).SetAutoReconnect(true).SetConnectRetry(true).
		SetConnectRetryInterval(100 * time.Millisecond).SetMaxReconnectInterval(time.Second))
	if tok := pc.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publisher: %v", tok.Error())
	}
	t.Cleanup(func() { pc.Disconnect(50) })
	return pc
}

func mqttTask(id string, input any) []byte {
	b, _ := json.Marshal(map[string]any{"task_id": id, "type": "test", "input": input})
	return b
}

func mqttSleepTask(id string, ms int) []byte {
	return mqttTask(id, map[string]any{"call": []map[string]any{{"tool": "sleep_ms", "args": map[string]int{"ms": ms}}}})
}

// sameEncoding checks that the results of the tasks published over
// MQTT are, byte for byte, what GET /agents/e2e/tasks/{id} answers: one
// encoding of a result whichever way it is read, error and output left out
// when there is none.
func sameEncoding(t *testing.T, c *child, col *mqtttest.Collector, ids ...string) {
	t.Helper()
	wait.For(t, 20*time.Second, "the results of "+strings.Join(ids, ", "), func() bool {
		rs := mqtttest.Results(t, col, resultsTopic("e2e"))
		for _, id := range ids {
			if len(rs[id]) == 0 {
				return false
			}
		}
		return true
	})
	over := map[string]string{}
	for _, m := range col.Messages(resultsTopic("e2e")) {
		var r struct {
			TaskID string `json:"task_id"`
		}
		if json.Unmarshal(m.Payload, &r) == nil {
			over[r.TaskID] = string(m.Payload)
		}
	}
	for _, id := range ids {
		var code int
		var body []byte
		if resp, err := httpc.Get(c.url() + "/agents/e2e/tasks/" + id); err == nil {
			code = resp.StatusCode
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if code != 200 || strings.TrimSpace(string(body)) != over[id] {
			t.Errorf("task %s over MQTT and over HTTP differ:\nmqtt %s\nhttp %d %s", id, over[id], code, body)
		}
		var r map[string]any
		_ = json.Unmarshal([]byte(over[id]), &r)
		if _, has := r["error"]; has != (r["status"] != "done") {
			t.Errorf("task %s: %s: error present only when the task did not succeed", id, over[id])
		}
	}
}

// TestMQTTEndToEnd drives one agent process over MQTT: a task and its
// result and progress, four kinds of dead letter while it keeps serving
// (an unknown field among them), results encoded as over HTTP, and a
// duplicate that does not run twice.
func TestMQTTEndToEnd(t *testing.T) {
	check := func(t *testing.T, c *child, url, data string) {
		col := mqtttest.Collect(t, url, "observer", true, "openstarry/#")
		pub := mqttPublisher(t, url)
		topic := tasksTopic("e2e")

		mqtttest.Publish(t, pub, topic, mqttTask("hello", "hello over mqtt"))
		mqtttest.Publish(t, pub, topic, mqttSleepTask("slow", 20))
		mqtttest.Publish(t, pub, topic, []byte("{this is not json"))
		mqtttest.Publish(t, pub, topic, []byte(`{"type":"t","input":"who am I"}`))
		mqtttest.Publish(t, pub, topic, []byte(`{"task_id":"x2","inptu":"hello"}`))
		mqtttest.Publish(t, pub, topic, []byte(`{"task_id":"late","input":"x","deadline":"2001-01-01T00:00:00Z"}`))
		// Over the agent's 256 KiB, under the embedded broker's 1 MiB
		// packet bound (a larger packet the broker itself refuses).
		mqtttest.Publish(t, pub, topic, mqttTask("huge", strings.Repeat("y", 512<<10)))
		mqtttest.Publish(t, pub, topic, mqttTask("next", "still serving"))
		line := func(id string) []byte {
			return mqttTask(id, map[string]any{"call": []map[string]any{{"tool": "file_append", "args": map[string]string{"file": "dup.txt", "line": id}}}})
		}
		mqtttest.Publish(t, pub, topic, line("dup"))
		mqtttest.Publish(t, pub, topic, line("dup"))

		wait.For(t, 20*time.Second, "results of hello, slow, next, dup", func() bool {
			rs := mqtttest.Results(t, col, resultsTopic("e2e"))
			return len(rs["hello"]) > 0 && len(rs["slow"]) > 0 && len(rs["next"]) > 0 && len(rs["dup"]) > 0
		})
		rs := mqtttest.Results(t, col, resultsTopic("e2e"))
		if r := rs["hello"][0]; r.Status != "done" || string(r.Output) != `"hello over mqtt"` || r.AgentID != "e2e" {
			t.Errorf("hello: %+v", r)
		}
		if len(rs["huge"]) != 0 {
			t.Errorf("the 512 KiB task ran: %+v", rs["huge"])
		}
		sameEncoding(t, c, col, "hello", "late")
		if len(rs["x2"]) != 0 {
			t.Errorf("the task with an unknown field ran: %+v", rs["x2"])
		}
		wait.For(t, 10*time.Second, "four dead letters", func() bool {
			return len(col.Messages("openstarry/"+mqttDevice+"/deadletter")) == 4
		})
		codes := map[string]bool{}
		unknown := false
		for _, m := range col.Messages("openstarry/" + mqttDevice + "/deadletter") {
			var dl struct{ Reason, Code, Topic string }
			if err := json.Unmarshal(m.Payload, &dl); err != nil || dl.Reason == "" || dl.Topic != topic {
				t.Errorf("dead letter %s", m.Payload)
			}
			codes[dl.Code] = true
			unknown = unknown || dl.Code == "bad_json" && strings.Contains(dl.Reason, `unknown field "inptu"`)
		}
		if !unknown {
			t.Errorf("no dead letter names the unknown field inptu: %v", codes)
		}
		for _, code := range []string{"bad_json", "missing_task_id", "too_large"} {
			if !codes[code] {
				t.Errorf("no dead letter with code %s: %v", code, codes)
			}
		}
		found := false
		for _, m := range col.Messages("openstarry/" + mqttDevice + "/agents/e2e/progress") {
			found = found || strings.Contains(string(m.Payload), `"task_id":"slow"`) && strings.Contains(string(m.Payload), `"progress_percent"`)
		}
		if !found {
			t.Error("no progress for the slow task")
		}
		wait.Settle(t, 200*time.Millisecond, "a second run of the duplicate would have published its result by now")
		if n := runs(mqtttest.Results(t, col, resultsTopic("e2e"))["dup"]); n != 1 {
			t.Errorf("the duplicate ran %d times", n)
		}
		data2, _ := os.ReadFile(filepath.Join(data, "agents", "e2e", "artifacts", "dup.txt"))
		if got := strings.Count(string(data2), "dup\n"); got != 1 {
			t.Errorf("dup.txt has the line %d times", got)
		}
		for _, want := range []string{"message rejected to openstarry/dev1/deadletter", "duplicate task acknowledged"} {
			if !strings.Contains(c.logs(), want) {
				t.Errorf("the log does not say %q", want)
			}
		}
	}
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.StartMosquitto(t, mqtttest.Options{})
		data := t.TempDir()
		c := runAgentMQTT(t, "e2e", data, "--broker", m.URL())
		check(t, c, m.URL(), data)
	})
	t.Run("embedded", func(t *testing.T) {
		data := t.TempDir()
		c := runAgentMQTT(t, "e2e", data, "--broker-listen", "127.0.0.1:0")
		check(t, c, embeddedURL(t, c), data)
	})
}

// TestMQTTKillAfterAck: the agent is SIGKILLed right after it acknowledged
// a task; the task runs after the restart, once.
func TestMQTTKillAfterAck(t *testing.T) {
	check := func(t *testing.T, url string, start func() *child) {
		col := mqtttest.Collect(t, url, "observer-kill", false, resultsTopic("k"))
		c := start()
		pub := mqttPublisher(t, url)
		mqtttest.Publish(t, pub, tasksTopic("k"), mqttSleepTask("first", 1500))
		mqtttest.Publish(t, pub, tasksTopic("k"), mqttSleepTask("second", 10))
		base := c.url()
		// Durable (known to the agent) means acknowledged, or about to be.
		wait.For(t, 10*time.Second, "the agent to accept both tasks", func() bool {
			c1, _, _ := getTask(base, "k", "first")
			c2, _, _ := getTask(base, "k", "second")
			return c1 == 200 && c2 == 200
		})
		c.kill()
		if n := len(mqtttest.Results(t, col, resultsTopic("k"))["first"]); n != 0 {
			t.Fatalf("the task finished before the kill (%d results); make it longer", n)
		}
		start()
		wait.For(t, 20*time.Second, "both results after the restart", func() bool {
			rs := mqtttest.Results(t, col, resultsTopic("k"))
			return len(rs["first"]) > 0 && len(rs["second"]) > 0
		})
		wait.Settle(t, 300*time.Millisecond, "a task run twice would have published its second result by now")
		for id, rs := range mqtttest.Results(t, col, resultsTopic("k")) {
			if runs(rs) != 1 || rs[0].Status != "done" {
				t.Errorf("task %s: %+v", id, rs)
			}
		}
	}
	t.Run("mosquitto", func(t *testing.T) {
		m := mqtttest.StartMosquitto(t, mqtttest.Options{})
		data := t.TempDir()
		check(t, m.URL(), func() *child { return runAgentMQTT(t, "k", data, "--broker", m.URL()) })
	})
	t.Run("embedded", func(t *testing.T) {
		// The broker dies with the agent; its sessions and queues live in
		// DATA/broker.db. The observer's session must exist first, so the
		// first start is made before the collector subscribes.
		data := t.TempDir()
		listen := fmt.Sprintf("127.0.0.1:%d", loopback.FreePort(t))
		first := runAgentMQTT(t, "k", data, "--broker-listen", listen)
		url := embeddedURL(t, first)
		starts := 0
		check(t, url, func() *child {
			starts++
			if starts == 1 {
				return first
			}
			return runAgentMQTT(t, "k", data, "--broker-listen", listen)
		})
	})
}

// TestMQTTBrokerKilled: Mosquitto is SIGKILLed mid-run and restarted on the
// same port; no task is lost and every result arrives after the reconnect.
func TestMQTTBrokerKilled(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	data := t.TempDir()
	col := mqtttest.Collect(t, m.URL(), "observer-bk", false, resultsTopic("bk"))
	c := runAgentMQTT(t, "bk", data, "--broker", m.URL())
	base := c.url()
	pub := mqttPublisher(t, m.URL())
	const before, after = 30, 10
	for i := range before {
		mqtttest.Publish(t, pub, tasksTopic("bk"), mqttSleepTask(fmt.Sprintf("b%02d", i), 60))
	}
	wait.For(t, 15*time.Second, "all tasks durable at the agent", func() bool {
		code, _, _ := getTask(base, "bk", fmt.Sprintf("b%02d", before-1))
		return code == 200
	})
	// Results are produced with no broker: the agent knows the broker is
	// gone and finishes a task it had not finished at the kill.
	finished := func() map[string]bool {
		done := map[string]bool{}
		for i := range before {
			id := fmt.Sprintf("b%02d", i)
			if code, st, _ := getTask(base, "bk", id); code == 200 && st.Status == "done" {
				done[id] = true
			}
		}
		return done
	}
	m.Kill()
	atKill := finished()
	wait.For(t, 10*time.Second, "a result produced with no broker", func() bool {
		if !strings.Contains(c.logs(), "connection to the broker lost") {
			return false
		}
		now := finished()
		return len(now) > len(atKill) || len(now) == before
	})
	m.Start()
	for i := range after {
		mqtttest.Publish(t, pub, tasksTopic("bk"), mqttSleepTask(fmt.Sprintf("a%02d", i), 1))
	}
	wait.For(t, 60*time.Second, "every result", func() bool {
		return len(mqtttest.Results(t, col, resultsTopic("bk"))) == before+after
	})
	for id, rs := range mqtttest.Results(t, col, resultsTopic("bk")) {
		if runs(rs) != 1 {
			t.Errorf("task %s ran %d times", id, runs(rs))
		}
	}
	for _, want := range []string{"connection to the broker lost", "connected to"} {
		if !strings.Contains(c.logs(), want) {
			t.Errorf("log lacks %q", want)
		}
	}
}

// retainedStatus returns a condition for wait.For: a new subscriber to
// topic gets, within half a second, a retained message containing every
// string of want.
func retainedStatus(t *testing.T, url, topic string, want ...string) func() bool {
	return func() bool {
		col := mqtttest.Collect(t, url, fmt.Sprintf("retained-%d", time.Now().UnixNano()), true, topic)
		defer col.Client.Disconnect(10)
		return wait.Poll(500*time.Millisecond, func() error {
			for _, msg := range col.Messages(topic) {
				all := msg.Retained
				for _, w := range want {
					all = all && strings.Contains(string(msg.Payload), w)
				}
				if all {
					return nil
				}
			}
			return errors.New("no such retained message")
		}) == nil
	}
}

// TestMQTTStatusWill: the retained status says online while the agent runs
// and offline (its last will) after a SIGKILL.
func TestMQTTStatusWill(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	c := runAgentMQTT(t, "st", t.TempDir(), "--broker", m.URL())
	status := "openstarry/" + mqttDevice + "/status"
	wait.For(t, 10*time.Second, "retained online status", retainedStatus(t, m.URL(), status, `"state":"online"`))
	c.kill()
	wait.For(t, 10*time.Second, "retained offline status (last will)", retainedStatus(t, m.URL(), status, `"state":"offline"`))
}

// TestMQTTFleetShared: two agent processes share the fleet subscription;
// 500 tasks on the fleet topic each run exactly once across the two.
func TestMQTTFleetShared(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	col := mqtttest.Collect(t, m.URL(), "observer-fleet", false, "openstarry/+/agents/+/results")
	// echo, run's default template, is a worker's: --fleet-workers.
	c1 := runAgentMQTT(t, "f1", t.TempDir(), "--broker", m.URL(), "--fleet-workers")
	c2 := runAgentMQTT(t, "f2", t.TempDir(), "--broker", m.URL(), "--device", "dev2", "--fleet-workers")
	for _, c := range []*child{c1, c2} {
		c.waitLog("subscribed to $share/openstarry/openstarry/fleet/tasks", 10*time.Second)
	}
	pub := mqttPublisher(t, m.URL())
	const n = 500
	toks := make([]paho.Token, 0, n)
	for i := range n {
		toks = append(toks, pub.Publish("openstarry/fleet/tasks", 1, false, mqttTask(fmt.Sprintf("fleet-%03d", i), i)))
	}
	for _, tok := range toks {
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	wait.For(t, 60*time.Second, "500 results", func() bool {
		return len(mqtttest.Results(t, col, "")) == n
	})
	wait.Settle(t, 300*time.Millisecond, "a task run twice would have published its second result by now")
	per := map[string]int{}
	for id, rs := range mqtttest.Results(t, col, "") {
		if runs(rs) != 1 {
			t.Errorf("task %s ran %d times: %+v", id, runs(rs), rs)
		}
		per[rs[0].AgentID]++
	}
	t.Logf("tasks per agent: %v", per)
	if per["f1"] == 0 || per["f2"] == 0 || per["f1"]+per["f2"] != n {
		t.Errorf("the fleet was not shared: %v", per)
	}
}

// exitRun runs the binary to its end and returns the exit code and stderr.
func exitRun(t *testing.T, timeout time.Duration, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	checkDefaultPorts(t, os.Environ(), args)
	cmd := exec.CommandContext(ctx, binPath, args...)
	cmd.Env = append(os.Environ(), "OPENSTARRY_LOG_FORMAT=json")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("openstarry %v still running after %s (a retry storm?)\n%s", args, timeout, stderr.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, stdout.String(), stderr.String()
}

// errorLines returns the lines of a run's stderr that report an error: the
// final "openstarry: ..." line and any error- or warn-level log record.
func errorLines(stderr string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if strings.HasPrefix(l, "openstarry: ") || strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"warn"`) {
			out = append(out, l)
		}
	}
	return out
}

// TestMQTTBadCredentials and TestMQTTBadTLSCA: one clear error line and a
// non-zero exit at startup, not a retry storm; the right settings connect.
func TestMQTTBadCredentials(t *testing.T) {
	dir := t.TempDir()
	pw := mqtttest.PasswordFile(t, dir, map[string]string{"dev1": "right-password"})
	m := mqtttest.StartMosquitto(t, mqtttest.Options{PasswordFile: pw})
	data := t.TempDir()
	code, _, stderr := exitRun(t, 30*time.Second, "run", "--agent", "cred", "--device", mqttDevice, "--listen", "",
		"--data", data, "--broker", m.URL(), "--mqtt-username", "dev1", "--mqtt-password", "wrong")
	lines := errorLines(stderr)
	if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], "refused") {
		t.Fatalf("exit %d, error lines %q\n%s", code, lines, stderr)
	}
	t.Logf("the error line: %s", lines[0])
	if n := strings.Count(m.Logs(), "not authorised"); n > 1 {
		t.Errorf("mosquitto refused %d connections; want 1\n%s", n, m.Logs())
	}

	// The right password, from the environment.
	c := startChildEnv(t, []string{"OPENSTARRY_MQTT_PASSWORD=right-password"}, "run", "--agent", "cred", "--device", mqttDevice,
		"--listen", "127.0.0.1:0", "--data", data, "--broker", m.URL(), "--mqtt-username", "dev1")
	c.url()
	c.waitLog("subscribed to "+tasksTopic("cred"), 10*time.Second)
}

func TestMQTTBadTLSCA(t *testing.T) {
	dir := t.TempDir()
	good := testcert.Write(t, dir, "hub")
	other := testcert.Write(t, dir, "stranger")
	m := mqtttest.StartMosquitto(t, mqtttest.Options{TLS: &good})
	data := t.TempDir()
	code, _, stderr := exitRun(t, 30*time.Second, "run", "--agent", "tls", "--device", mqttDevice, "--listen", "",
		"--data", data, "--broker", m.URL(), "--mqtt-ca", other.CA)
	lines := errorLines(stderr)
	if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], "TLS") || !strings.Contains(lines[0], "certificate") {
		t.Fatalf("exit %d, error lines %q\n%s", code, lines, stderr)
	}
	t.Logf("the error line: %s", lines[0])

	c := startChild(t, true, "run", "--agent", "tls", "--device", mqttDevice, "--listen", "127.0.0.1:0",
		"--data", data, "--broker", m.URL(), "--mqtt-ca", good.CA)
	c.url()
	c.waitLog("subscribed to "+tasksTopic("tls"), 10*time.Second)
}

// startChildEnv is startChild with extra environment variables.
func startChildEnv(t *testing.T, env []string, args ...string) *child {
	t.Helper()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	return startChild(t, true, args...)
}

// TestMQTTUnreachableHubIsNotFatal: with the hub down at startup the agent
// runs (HTTP tasks work), retries, and connects once the hub appears.
func TestMQTTUnreachableHubIsNotFatal(t *testing.T) {
	port := loopback.FreePort(t)
	url := fmt.Sprintf("tcp://127.0.0.1:%d", port)
	data := t.TempDir()
	c := startChild(t, true, "run", "--agent", "late", "--device", mqttDevice, "--listen", "127.0.0.1:0", "--data", data, "--broker", url)
	base := c.url()
	if code, body, err := postTask(context.Background(), base, "late", mqttTask("offline-1", "made while the hub was down")); err != nil || code != 202 {
		t.Fatalf("HTTP task: %d %s %v", code, body, err)
	}
	c.waitLog("broker unreachable", 10*time.Second)
	// The hub appears on that port; the result made meanwhile reaches it.
	m := mqtttest.StartMosquittoOnPort(t, port, mqtttest.Options{})
	col := mqtttest.Collect(t, m.URL(), "observer-late", false, resultsTopic("late"))
	_ = col
	c.waitLog("subscribed to "+tasksTopic("late"), 30*time.Second)
	wait.For(t, 30*time.Second, "the held result", func() bool {
		return len(mqtttest.Results(t, col, resultsTopic("late"))["offline-1"]) > 0
	})
}

// TestTaskSend drives `openstarry task send` against an agent.
func TestTaskSend(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	runAgentMQTT(t, "ts", t.TempDir(), "--broker", m.URL())
	send := func(args ...string) (int, string, string) {
		return exitRun(t, 30*time.Second, append([]string{"task", "send", "--broker", m.URL(), "--device", mqttDevice}, args...)...)
	}

	code, out, stderr := send("--agent", "ts", "--input", "plain text", "--task-id", "ts-1", "--wait", "--timeout", "10s")
	var r mqtttest.Result
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.TaskID != "ts-1" || r.Status != "done" || string(r.Output) != `"plain text"` {
		t.Fatalf("text: exit %d out %q err %s", code, out, stderr)
	}

	file := filepath.Join(t.TempDir(), "input.json")
	os.WriteFile(file, []byte(`{"call": [{"tool": "sleep_ms", "args": {"ms": 5}}]}`+"\n"), 0o600)
	code, out, stderr = send("--agent", "ts", "--input", "@"+file, "--wait")
	if code != 0 || !strings.Contains(out, `"slept_ms":5`) || !strings.Contains(out, `"status":"done"`) {
		t.Fatalf("@file: exit %d out %q err %s", code, out, stderr)
	}

	if code, _, stderr := send("--fleet", "--input", "x", "--republish", "-1s"); code == 0 || !strings.Contains(stderr, "--republish must not be negative") {
		t.Fatalf("--republish -1s: exit %d err %s", code, stderr)
	}

	// A failing task prints its result and exits 1.
	code, out, _ = send("--agent", "ts", "--input", "too late", "--deadline", "-1m", "--wait")
	if code != 1 || !strings.Contains(out, `"status":"failed"`) {
		t.Fatalf("failed task: exit %d out %q", code, out)
	}

	// Without --wait: published, the id printed.
	code, out, _ = send("--agent", "ts", "--input", "x", "--task-id", "ts-nowait")
	if code != 0 || !strings.Contains(out, `"task_id":"ts-nowait"`) {
		t.Fatalf("no wait: exit %d out %q", code, out)
	}

	// Nobody answers: a clear timeout.
	code, _, stderr = send("--agent", "nobody", "--input", "x", "--wait", "--timeout", "500ms")
	if code == 0 || !strings.Contains(stderr, "no result within the timeout") {
		t.Fatalf("timeout: exit %d stderr %s", code, stderr)
	}
	// A bad input file.
	if code, _, stderr = send("--agent", "ts", "--input", "@/nonexistent/file"); code == 0 || !strings.Contains(stderr, "--input") {
		t.Fatalf("bad file: exit %d stderr %s", code, stderr)
	}
}

// TestMQTTDisabled: --no-mqtt starts neither a broker nor a client.
func TestMQTTDisabled(t *testing.T) {
	c := startChild(t, true, "run", "--agent", "nomqtt", "--listen", "127.0.0.1:0", "--data", t.TempDir(), "--no-mqtt")
	c.url()
	if strings.Contains(c.logs(), "embedded broker") || strings.Contains(c.logs(), "mqtt: connected") {
		t.Fatalf("MQTT started with --no-mqtt\n%s", c.logs())
	}
}

// TestBrokerUsers: the embedded broker of run takes a users file; a device
// user logs in from "off the device" with its password, a wrong one is
// refused with one clear error, and the hash comes from `broker
// hash-password`.
func TestBrokerUsers(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(binPath, "broker", "hash-password")
	cmd.Stdin = strings.NewReader("s3cret\n")
	out, err := cmd.Output()
	if err != nil || !strings.HasPrefix(string(out), "$7$") {
		t.Fatalf("hash-password: %q %v", out, err)
	}
	users := filepath.Join(dir, "users.json")
	body, _ := json.Marshal(map[string]any{"users": []map[string]string{
		{"username": mqttDevice, "password_hash": strings.TrimSpace(string(out))},
	}})
	if err := os.WriteFile(users, body, 0o600); err != nil {
		t.Fatal(err)
	}
	c := runAgentMQTT(t, "u1", t.TempDir(), "--broker-listen", "127.0.0.1:0", "--broker-users", users)
	url := embeddedURL(t, c)
	send := func(pw string) (int, string, string) {
		return exitRun(t, 20*time.Second, "task", "send", "--broker", url, "--device", mqttDevice, "--agent", "u1",
			"--mqtt-username", mqttDevice, "--mqtt-password", pw, "--input", "auth", "--wait", "--timeout", "5s")
	}
	if code, out, stderr := send("s3cret"); code != 0 || !strings.Contains(out, `"output":"auth"`) {
		t.Fatalf("right password: exit %d %s %s", code, out, stderr)
	}
	code, _, stderr := send("wrong")
	if lines := errorLines(stderr); code == 0 || len(lines) != 1 || !strings.Contains(lines[0], "refused") {
		t.Fatalf("wrong password: exit %d %q", code, lines)
	}
	// A users file in clear text is refused at startup.
	os.WriteFile(users, []byte(`{"users":[{"username":"dev1","password_hash":"s3cret"}]}`), 0o600)
	code, _, stderr = exitRun(t, 20*time.Second, "run", "--agent", "u2", "--listen", "", "--data", t.TempDir(),
		"--broker-listen", "127.0.0.1:0", "--broker-users", users)
	if code == 0 || !strings.Contains(stderr, "password hash") {
		t.Fatalf("clear-text users file: exit %d %s", code, stderr)
	}
}
