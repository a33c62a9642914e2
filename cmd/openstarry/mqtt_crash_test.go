package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/crashseed"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestMQTTCrashRecovery: a hub publishes tasks that each append a line,
// while the agent is SIGKILLed at random instants and restarted. Every task
// published gets a result, no tool runs twice, and a result published more
// than once is the same execution (same tick). With OPENSTARRY_TORTURE set
// (make torture) it runs 3,000 tasks through 150 kills.
func TestMQTTCrashRecovery(t *testing.T) {
	tasks, kills := 200, 12
	if os.Getenv("OPENSTARRY_TORTURE") != "" {
		tasks, kills = 3000, 150
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"max_queued_messages 0"}})
	data := t.TempDir()
	const agentID = "mc"
	col := mqtttest.Collect(t, m.URL(), "observer-crash", false, resultsTopic(agentID))
	c := runAgentMQTT(t, agentID, data, "--broker", m.URL())
	t.Logf("%d tasks, %d kills", tasks, kills)
	seed := crashseed.Seed(t)

	// The hub: bursts of tasks with short pauses, whatever the agent does.
	pub := mqttPublisher(t, m.URL())
	published := make(chan error, 1)
	go func() {
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range tasks {
			tok := pub.Publish(tasksTopic(agentID), 1, false, appendTask(fmt.Sprintf("task-%04d", i), "tasks.log"))
			if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
				published <- fmt.Errorf("publish task %d: %v", i, tok.Error())
				return
			}
			if i%2 == 1 {
				time.Sleep(time.Duration(rng.IntN(10)) * time.Millisecond)
			}
		}
		published <- nil
	}()

	rng := rand.New(rand.NewPCG(seed, 2))
	for range kills {
		time.Sleep(time.Duration(5+rng.IntN(80)) * time.Millisecond)
		c.kill()
		c = runAgentMQTT(t, agentID, data, "--broker", m.URL())
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}

	wait.For(t, 2*time.Minute, fmt.Sprintf("results of all %d tasks", tasks), func() bool {
		return len(mqtttest.Results(t, col, resultsTopic(agentID))) == tasks
	})
	ends := map[string]taskEnd{}
	republished := 0
	for id, rs := range mqtttest.Results(t, col, resultsTopic(agentID)) {
		if n := runs(rs); n != 1 {
			t.Errorf("task %s ran %d times: %+v", id, n, rs)
		}
		republished += len(rs) - 1
		ends[id] = taskEnd{rs[0].Status, rs[0].Error}
	}
	done, unknown := checkSideEffects(t, filepath.Join(data, "agents", agentID, "artifacts", "tasks.log"), ends)
	t.Logf("%d tasks: %d done, %d unknown_outcome, %d results published again, %d kills", tasks, done, unknown, republished, kills)
}

// TestMQTTLongOutage: the hub goes away while 1,500 tasks (sent over HTTP
// meanwhile) run; their results wait in the outbox, the agent SIGKILLed and
// restarted halfway keeps them, and when the hub returns every result
// arrives once per execution, in the order the agent produced them.
func TestMQTTLongOutage(t *testing.T) {
	const tasks = 1500
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"max_queued_messages 0"}})
	data := t.TempDir()
	const agentID = "lo"
	col := mqtttest.Collect(t, m.URL(), "observer-outage", false, resultsTopic(agentID))
	c := runAgentMQTT(t, agentID, data, "--broker", m.URL())
	m.Kill()
	send := func(from, to int) {
		base := c.url()
		for i := from; i < to; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			code, body, err := postTask(ctx, base, agentID, mqttTask(fmt.Sprintf("out-%04d", i), fmt.Sprintf("result %d", i)))
			cancel()
			if err != nil || code != 202 {
				t.Fatalf("task %d: %d %s %v", i, code, body, err)
			}
		}
		wait.For(t, time.Minute, "the tasks to run", func() bool {
			code, st, _ := getTask(base, agentID, fmt.Sprintf("out-%04d", to-1))
			return code == 200 && st.Status == "done"
		})
	}
	send(0, tasks/2)
	c.kill()
	c = startChild(t, true, "run", "--agent", agentID, "--device", mqttDevice, "--listen", "127.0.0.1:0", "--data", data,
		"--broker", m.URL())
	send(tasks/2, tasks)
	if n := len(mqtttest.Results(t, col, resultsTopic(agentID))); n != 0 {
		t.Fatalf("%d results arrived with the hub down", n)
	}

	m.Start()
	wait.For(t, time.Minute, fmt.Sprintf("all %d results", tasks), func() bool {
		return len(mqtttest.Results(t, col, resultsTopic(agentID))) == tasks
	})
	var last uint64
	seen := map[string]bool{}
	for _, msg := range col.Messages(resultsTopic(agentID)) {
		var r mqtttest.Result
		if err := json.Unmarshal(msg.Payload, &r); err != nil {
			t.Fatal(err)
		}
		if seen[r.TaskID] {
			continue // published again (at least once): same execution, checked below
		}
		seen[r.TaskID] = true
		if r.TickIndex <= last {
			t.Fatalf("result of %s (tick %d) arrived after tick %d", r.TaskID, r.TickIndex, last)
		}
		last = r.TickIndex
	}
	for id, rs := range mqtttest.Results(t, col, resultsTopic(agentID)) {
		if runs(rs) != 1 || rs[0].Status != "done" {
			t.Errorf("task %s: %+v", id, rs)
		}
	}
}
