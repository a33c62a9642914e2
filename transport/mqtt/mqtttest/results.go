package mqtttest

import (
	"encoding/json"
	"testing"
)

// Result is a result message as the agents publish it.
type Result struct {
	TaskID    string          `json:"task_id"`
	AgentID   string          `json:"agent_id"`
	Status    string          `json:"status"`
	Output    json.RawMessage `json:"output"`
	Error     string          `json:"error"`
	TickIndex uint64          `json:"tick_index"`
}

// Results groups the result messages a collector received on topics
// matching filter by task id; a message that is not JSON fails the test.
func Results(t testing.TB, c *Collector, filter string) map[string][]Result {
	t.Helper()
	out := map[string][]Result{}
	for _, m := range c.Messages(filter) {
		var r Result
		if err := json.Unmarshal(m.Payload, &r); err != nil {
			t.Fatalf("result is not JSON: %s", m.Payload)
		}
		out[r.TaskID] = append(out[r.TaskID], r)
	}
	return out
}
