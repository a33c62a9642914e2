package agent

import (
	"bytes"
	"strings"
	"testing"
)

// scanTaskCases are tasks as clients send them: scanTask must take each.
var scanTaskCases = []string{
	`{"task_id":"t1","input":"hi"}`,
	` {"task_id" : "t1" , "input" : {"call":[{"tool":"sleep_ms","args":{"ms":1}}]} } ` + "\n",
	`{"task_id":"t1"}`,
	`{}`,
	`{"task_id":"t1","type":"chat","input":null,"project_id":"p","session_id":"s","deadline":"2030-01-01T00:00:00Z","resume_context":{"a":[1,-2.5e+3,true,false,null,"\u00e9\n"]}}`,
	`{"task_id":"t1","input":"caf\u00e9 ☕","type":"été"}`,
	`{"task_id":"t1","input":{"a":{"b":1},"c":{"b":2},"d":[{"x":1},{"x":1}]}}`,
	`{"task_id":"t1","input":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":18}}`,
}

// TestScanTask: the tasks clients send take the one-pass path, and it
// reads them as encoding/json does; what it leaves to the slow path
// (malformed, or unusual but valid) is decoded there.
func TestScanTask(t *testing.T) {
	for _, doc := range scanTaskCases {
		got, ok := scanTask([]byte(doc))
		if !ok {
			t.Errorf("scanTask left %s to the slow path", doc)
			continue
		}
		want, err := decodeTaskJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s: %v", doc, err)
		}
		if !sameTask(got, want) {
			t.Errorf("%s: scanTask read %+v, encoding/json %+v", doc, got, want)
		}
	}
	for _, doc := range []string{
		`{"TASK_ID":"t1"}`,                            // valid: encoding/json ignores case
		`{"task_id":"t\u0031"}`,                       // valid: an escape in a field
		`{"task_id":"t1","input":{"\u0061":1,"a":2}}`, // a duplicate, escaped
		`{"task_id":"t1","inptu":1}`,
		`{"task_id":"t1","task_id":"t2"}`,
		`{"task_id":"t1","input":{"a":1,"a":2}}`,
		`{"task_id":"t1","input":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k0":17}}`,
		`{"task_id":"t1"} x`,
		`{"task_id":"t1",}`,
		`{"task_id":"t1","input":01}`,
		`{"task_id":"t1","input":1.}`,
		`{"task_id":"t1","input":"\x"}`,
		"{\"task_id\":\"t\xff\"}",
		"{\"task_id\":\"t\x01\"}",
		`{"task_id":null}`,
		`{"task_id":1}`,
		`[]`,
		``,
		`{"task_id":"t1","input":` + strings.Repeat("[", 2000) + strings.Repeat("]", 2000) + `}`,
	} {
		if got, ok := scanTask([]byte(doc)); ok {
			t.Errorf("scanTask took %q (%+v); the slow path reads it", doc, got)
		}
	}
}

func sameTask(a, b Task) bool {
	return a.TaskID == b.TaskID && a.Type == b.Type && a.ProjectID == b.ProjectID && a.SessionID == b.SessionID &&
		a.Deadline == b.Deadline && bytes.Equal(a.Input, b.Input) && bytes.Equal(a.ResumeContext, b.ResumeContext)
}

// FuzzScanTask: whatever scanTask takes, encoding/json and the duplicate
// check take too, as the same task.
func FuzzScanTask(f *testing.F) {
	for _, doc := range scanTaskCases {
		f.Add([]byte(doc))
	}
	f.Add([]byte(`{"task_id":"t1","input":{"a":1,"a":2}}`))
	f.Add([]byte(`{"task_id":"t1","input":-0.5E-7}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, ok := scanTask(data)
		if !ok {
			return
		}
		want, err := decodeTaskJSON(data)
		if err != nil {
			t.Fatalf("scanTask took %q, which the slow path refuses: %v", data, err)
		}
		if !sameTask(got, want) {
			t.Fatalf("%q: scanTask read %+v, encoding/json %+v", data, got, want)
		}
	})
}

// BenchmarkDecodeTask: a 1 KiB task, one pass (DecodeTask) against
// encoding/json and the duplicate-key scan (the slow path).
func BenchmarkDecodeTask(b *testing.B) {
	data := []byte(`{"task_id":"bench-000001","type":"echo","session_id":"s1","input":{"text":"` + strings.Repeat("lorem ipsum ", 80) + `","n":[1,2,3],"ok":true}}`)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := DecodeTask(data, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			if _, err := decodeTaskJSON(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTaskEvent: queueing a 1 KiB task DecodeTask read.
func BenchmarkTaskEvent(b *testing.B) {
	data := []byte(`{"task_id":"bench-000001","type":"bench","input":"` + strings.Repeat("x", 990) + `"}`)
	task, err := DecodeTask(data, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := TaskEvent(task, "mqtt", 1); err != nil {
			b.Fatal(err)
		}
	}
}
