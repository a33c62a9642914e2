package daemon

import (
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// FuzzNormaliseTask feeds the worker-task check of the control API
// arbitrary bodies: it never panics, what it accepts is a valid task with
// the task_id it reports, and normalising that again changes nothing.
func FuzzNormaliseTask(f *testing.F) {
	f.Add([]byte(`{"task_id":"t1","type":"test","input":"hello"}`))
	f.Add([]byte(`{"type":"test","input":{"call":[{"tool":"sleep_ms","args":{"ms":1}}]}}`))
	f.Add([]byte(`{"task_id":""}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"task_id":7}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, id, err := normaliseTask(raw)
		if err != nil {
			return
		}
		task, err := agent.DecodeTask(out, 0)
		if err != nil || task.TaskID != id {
			t.Fatalf("accepted %s as %s (task_id %q), which decodes as %+v, %v", raw, out, id, task, err)
		}
		again, id2, err := normaliseTask(out)
		if err != nil || id2 != id || string(again) != string(out) {
			t.Fatalf("normalising %s again gave %s (%q), %v", out, again, id2, err)
		}
	})
}
