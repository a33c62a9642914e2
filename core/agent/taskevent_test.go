package agent

import (
	"encoding/json"
	"reflect"
	"testing"
	"unsafe"
)

// TestTaskEventCarriesTheDecodedTask: the task TaskEvent hands the tick is
// what decoding the event's payload gives (what a hydrated event is read
// as), and its input shares the payload's bytes instead of copying them.
func TestTaskEventCarriesTheDecodedTask(t *testing.T) {
	for _, payload := range []string{
		`{"task_id":"t1","input":"hello"}`,
		`{"task_id":"t2","type":"x","input": { "call" : [ {"tool":"sleep_ms","args":{"ms":1}} ] } ,"deadline":"2030-01-01T00:00:00Z"}`,
		`{"task_id":"t3"}`,
		`{"input":"t4","task_id":"t4"}`,
		`{"task_id":"t5","input":null,"project_id":"p","session_id":"s"}`,
	} {
		task, err := DecodeTask([]byte(payload), 0)
		if err != nil {
			t.Fatalf("%s: %v", payload, err)
		}
		ev, err := TaskEvent(task, "test", 1)
		if err != nil {
			t.Fatal(err)
		}
		if ev.task == nil {
			t.Fatalf("%s: no decoded task carried", payload)
		}
		var want Task
		if err := json.Unmarshal(ev.Payload, &want); err != nil {
			t.Fatal(err)
		}
		got := *ev.task
		if len(want.Input) == 0 {
			want.Input = json.RawMessage("null") // as DecodeTask fills it
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: carried %+v, decoding the payload gives %+v", payload, got, want)
		}
		if in := got.Input; len(in) > 0 && string(in) != "null" {
			start := uintptr(unsafe.Pointer(unsafe.SliceData(in)))
			base := uintptr(unsafe.Pointer(unsafe.SliceData(ev.Payload)))
			if start < base || start+uintptr(len(in)) > base+uintptr(len(ev.Payload)) {
				t.Errorf("%s: the carried input is a copy, not the payload's bytes", payload)
			}
		}
	}
	// A task built in Go carries nothing: the payload is its encoding.
	ev, err := TaskEvent(&Task{TaskID: "go", Input: json.RawMessage(`"x"`)}, "test", 1)
	if err != nil || ev.task != nil {
		t.Fatalf("Go-built task: %+v %v", ev, err)
	}
}
