package agent

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestDecodeTask(t *testing.T) {
	cases := []struct {
		name, data string
		max        int
		code       string
	}{
		{"ok string", `{"task_id":"t1","input":"hi"}`, 0, ""},
		{"ok call", `{"task_id":"t1","type":"x","input":{"call":[]},"project_id":"p","deadline":"2030-01-01T00:00:00Z"}`, 0, ""},
		{"unknown field", `{"task_id":"t1","inptu":"hello"}`, 0, CodeBadJSON},
		{"unknown field, hub's own", `{"task_id":"t1","input":"hi","extra":1}`, 0, CodeBadJSON},
		{"not json", `{"task_id":`, 0, CodeBadJSON},
		{"array", `[1]`, 0, CodeBadJSON},
		{"trailing", `{"task_id":"t"} x`, 0, CodeBadJSON},
		{"trailing bracket", `{"task_id":"t1"}]`, 0, CodeBadJSON},
		{"not utf-8", "{\"task_id\":\"t1\",\"input\":\"a\xffb\"}", 0, CodeBadJSON},
		{"missing id", `{"input":"x"}`, 0, CodeMissingTaskID},
		{"path id", `{"task_id":"../../x"}`, 0, CodeBadTaskID},
		{"too large", `{"task_id":"t1","input":"` + strings.Repeat("x", 100) + `"}`, 64, CodeTooLarge},
		{"bad deadline", `{"task_id":"t1","deadline":"tomorrow"}`, 0, CodeBadDeadline},
		{"duplicate task_id", `{"task_id":"a","task_id":"t1"}`, 0, CodeBadJSON},
		{"duplicate task_id, other case", `{"task_id":"t1","TASK_ID":"b"}`, 0, CodeBadJSON},
		{"duplicate task_id, escaped", `{"task_id":"t1","task\u005fid":"b"}`, 0, CodeBadJSON},
		{"duplicate input", `{"task_id":"t1","input":"a","input":"b"}`, 0, CodeBadJSON},
		{"duplicate nested key", `{"task_id":"t1","input":{"call":[{"tool":"x","args":{"a":1,"a":2}}]}}`, 0, CodeBadJSON},
		{"nested keys differing in case", `{"task_id":"t1","input":{"a":1,"A":2,"x":{"a":[{"a":1},{"a":2}]}}}`, 0, ""},
		{"same key in sibling objects", `{"task_id":"t1","input":[{"k":"\"}"},{"k":2}]}`, 0, ""},
		{"plan task namespace", `{"task_id":"plan:proj_20240115_a1b2c3:sess_20240115143000_x1y2z3:task_p1_a_001:0","input":"x"}`, 0, CodeReservedID},
		{"plan task namespace, any id in it", `{"task_id":"plan:task_p1_preempt_001"}`, 0, CodeReservedID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task, err := DecodeTask([]byte(tc.data), tc.max)
			if tc.code == "" {
				if err != nil || task.TaskID != "t1" {
					t.Fatalf("DecodeTask = %v, %v", task, err)
				}
				return
			}
			var te *TaskError
			if !errors.As(err, &te) || te.Code != tc.code {
				t.Fatalf("DecodeTask error = %v, want code %s", err, tc.code)
			}
		})
	}
}

// TestDecodePlanTask: the daemon's dispatcher, whose request the transport
// authenticated, may use the plan: namespace; the other checks still hold.
func TestDecodePlanTask(t *testing.T) {
	id := "plan:proj_20240115_a1b2c3:sess_20240115143000_x1y2z3:task_p1_a_001:0"
	task, err := DecodePlanTask([]byte(`{"task_id":"`+id+`","resume_context":{"a":1}}`), 0)
	if err != nil || task.TaskID != id || string(task.ResumeContext) != `{"a":1}` {
		t.Fatalf("DecodePlanTask = %+v, %v", task, err)
	}
	if _, err := DecodePlanTask([]byte(`{"task_id":"plan:../x"}`), 0); err == nil {
		t.Fatal("a bad id in the namespace was accepted")
	}
	// Ids that merely look alike are anyone's.
	for _, ok := range []string{"PLAN:x", "plan_x", "x:plan:y"} {
		if _, err := DecodeTask([]byte(`{"task_id":"`+ok+`"}`), 0); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

// TestIDMessageUTF8: the refusal of a non-ASCII id names the character,
// not the bytes of its encoding.
func TestIDMessageUTF8(t *testing.T) {
	err := ValidateID("tâche-é")
	if err == nil || !strings.Contains(err.Error(), `character 'â' at byte 1`) || strings.Contains(err.Error(), "Ã") {
		t.Fatalf("message: %v", err)
	}
	if _, err := DecodeTask([]byte(`{"task_id":"日本"}`), 0); err == nil || !strings.Contains(err.Error(), `'日'`) {
		t.Fatalf("message: %v", err)
	}
}

// TestTaskErrorWords: a refused task is explained in the API's words: the
// unknown field named (with the fields a task has), the JSON type expected,
// never a Go type.
func TestTaskErrorWords(t *testing.T) {
	for _, tc := range []struct{ data, want string }{
		{`{"task_id":"x2","inptu":"hello"}`, `task has an unknown field "inptu" (a task has task_id, type, input, project_id, session_id, deadline)`},
		{`[1]`, "task must be a JSON object, not an array"},
		{`"hello"`, "task must be a JSON object, not a string"},
		{`{"task_id":7}`, "task: task_id must be a string, not a number"},
		{`{"task_id":"t1","deadline":1}`, "task: deadline must be a string, not a number"},
		{`{"task_id":"t1"} {}`, "task is not valid JSON: data after the task's object"},
	} {
		_, err := DecodeTask([]byte(tc.data), 0)
		var te *TaskError
		if !errors.As(err, &te) || te.Code != CodeBadJSON || te.Msg != tc.want {
			t.Errorf("%s: %v, want bad_json %q", tc.data, err, tc.want)
		}
		if err != nil && (strings.Contains(err.Error(), "Go ") || strings.Contains(err.Error(), "agent.")) {
			t.Errorf("%s: %q names a Go type", tc.data, err)
		}
	}
}

// TestDuplicateKey against encoding/json's tokens on documents of every
// shape.
func TestDuplicateKey(t *testing.T) {
	for _, tc := range []struct {
		doc string
		key string
	}{
		{`{}`, ""},
		{`[]`, ""},
		{`"x"`, ""},
		{`{"a":{"b":1},"c":{"b":2}}`, ""},
		{`{"a":[1,2,{"b":true,"b":false}]}`, "b"},
		{` { "a" : null , "a" : 1 } `, "a"},
		{`{"\"":1,"\"":2}`, `"`},
		{`{"a":"}{\"a\":1","b":1}`, ""},
		{`[{"x":1},{"x":1}]`, ""},
	} {
		k, dup := duplicateKey([]byte(tc.doc))
		if dup != (tc.key != "") || k != tc.key {
			t.Errorf("%s: %q %v, want %q", tc.doc, k, dup, tc.key)
		}
	}
}

func FuzzDecodeTask(f *testing.F) {
	f.Add([]byte(`{"task_id":"t1","input":"hi"}`), 0)
	f.Add([]byte(`{"task_id":"t1","input":{"call":[{"tool":"sleep_ms","args":{"ms":1}}]}}`), 1024)
	f.Add([]byte(`{"task_id":""}`), 0)
	f.Add([]byte(`null`), 0)
	f.Add([]byte(`{"task_id":"t","deadline":"2030-01-01T00:00:00Z"}`), 10)
	f.Add([]byte(`{"task_id":"t","task_id":"u","input":{"a":[{"b":1,"b":2}]}}`), 0)
	f.Fuzz(func(t *testing.T, data []byte, max int) {
		task, err := DecodeTask(data, max)
		if err != nil {
			var te *TaskError
			if !errors.As(err, &te) || te.Code == "" {
				t.Fatalf("error without a code: %v", err)
			}
			return
		}
		if ValidateID(task.TaskID) != nil {
			t.Fatalf("accepted task with bad id %q", task.TaskID)
		}
		if max > 0 && len(data) > max {
			t.Fatal("accepted an oversized task")
		}
		ev, err := TaskEvent(task, "fuzz", 1)
		if err != nil {
			t.Fatalf("accepted task does not become an event: %v", err)
		}
		// What is queued decodes to the same task, and is valid JSON in
		// valid UTF-8 (every store can hold it).
		again, err := DecodeTask(ev.Payload, 0)
		if err != nil {
			t.Fatalf("queued payload %q does not decode: %v", ev.Payload, err)
		}
		if again.TaskID != task.TaskID || again.Deadline != task.Deadline || !utf8.Valid(ev.Payload) {
			t.Fatalf("queued payload %q is not the task %+v", ev.Payload, task)
		}
	})
}

// TestTaskEventPayload: a task is queued as it came (its bytes, spacing and
// key order kept); one built in Go is encoded.
func TestTaskEventPayload(t *testing.T) {
	cases := []struct {
		name, data, want string
	}{
		{"as sent", `{"task_id":"t1", "input":{"b":1, "a":2}}`, `{"task_id":"t1", "input":{"b":1, "a":2}}`},
		{"no input", `{"task_id":"t1"}`, `{"task_id":"t1"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			task, err := DecodeTask([]byte(tc.data), 0)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := TaskEvent(task, "mqtt", 5)
			if err != nil {
				t.Fatal(err)
			}
			if string(ev.Payload) != tc.want || ev.ID != "t1" || ev.Source != "mqtt" || ev.Type != "task" || ev.ReceivedAt != 5 {
				t.Fatalf("event = %+v (payload %s), want payload %s", ev, ev.Payload, tc.want)
			}
		})
	}
	// A task built in Go is encoded.
	ev, err := TaskEvent(&Task{TaskID: "t2", Input: []byte(`"x"`)}, "http", 1)
	if err != nil || string(ev.Payload) != `{"task_id":"t2","input":"x"}` {
		t.Fatalf("TaskEvent = %s, %v", ev.Payload, err)
	}
}
