package agent

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// checkAppendJSON fails t unless every encoder of appendjson.go writes what
// json.Marshal writes, or fails as it does, for values built from s, raw.
func checkAppendJSON(t *testing.T, s string, raw []byte, n uint64) {
	t.Helper()
	vals := []interface {
		AppendJSON([]byte) ([]byte, error)
	}{
		&Result{Seq: n, TaskID: s, AgentID: "a1", Status: ResultDone, Output: raw, Error: s, TickIndex: n, Source: s, FinishedAt: int64(n)},
		&Result{TaskID: s, Output: raw},
		&Event{Source: s, Type: "task", Payload: raw, ID: s, ReceivedAt: -int64(n)},
		&Event{Payload: raw},
		&TaskState{TaskID: s, AgentID: s, Status: s, Output: raw, Error: s, TickIndex: n},
		&TaskState{Output: raw, Current: &Current{}},
	}
	for _, v := range vals {
		want, wantErr := json.Marshal(v)
		got, err := v.AppendJSON([]byte("prefix"))
		if (err != nil) != (wantErr != nil) || err != nil && err.Error() != wantErr.Error() {
			t.Fatalf("%T %q, %q: error %v, json.Marshal's %v", v, s, raw, err, wantErr)
		}
		if err == nil && !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Fatalf("%T %q, %q:\n got %s\nwant prefix%s", v, s, raw, got, want)
		}
	}
}

func TestAppendJSON(t *testing.T) {
	for _, raw := range []string{
		"", "null", `"x"`, `"a<b"`, `"\u2028"`, "\"\u2028\"", `"é"`, "\"\xff\"", `{"a":[1,-2.5e+3,true,false,null,{}],"b":[]}`,
		`{ "a": 1 }`, `[1, 2]`, `{"a":1,}`, `[1,]`, `01`, `1.`, `1e`, `-`, `tru`, `"\q"`, `"\u12g4"`, `"abc`, `{"a"1}`,
		"\"a\tb\"", `"a\"b\\c\/d\b\f\n\r\t\u00e9"`, `0`, `-0.0e-0`, `123456789012345678901234567890`, `{"x":"<script>&"}`,
		strings.Repeat("[", 70) + strings.Repeat("]", 70), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
		`{}x`, `""`, `[[],[[]]]`, ` 1`, `1 `,
	} {
		for _, s := range []string{"", "task-1", "a<b>&c", "é", "\xff", "\u2028", "tab\there", `q"uote\`} {
			checkAppendJSON(t, s, []byte(raw), 42)
		}
	}
	checkAppendJSON(t, "t", nil, 0)
}

func FuzzAppendJSON(f *testing.F) {
	f.Add("task-1", []byte(`{"a":[1,"x"]}`), uint64(7))
	f.Add("a<b", []byte(`"\u2028 <"`), uint64(0))
	f.Add("", []byte(`[1, 2]`), uint64(1<<63))
	f.Fuzz(func(t *testing.T, s string, raw []byte, n uint64) {
		checkAppendJSON(t, s, raw, n)
	})
}

// BenchmarkAppendJSON compares the encoders with json.Marshal on a task's
// result with a 1 KiB output and on its queued event.
func BenchmarkAppendJSON(b *testing.B) {
	out, _ := json.Marshal(strings.Repeat("x", 1000))
	r := &Result{Seq: 12345, TaskID: "task-000123", AgentID: "agent-1", Status: ResultDone, Output: out,
		TickIndex: 6789, Source: "mqtt", FinishedAt: 1790000000000}
	ev := &Event{Source: "mqtt", Type: "task", Payload: []byte(`{"task_id":"task-000123","type":"bench","input":` + string(out) + `}`),
		ID: "task-000123", ReceivedAt: 1790000000000}
	b.Run("result/json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(r)
		}
	})
	b.Run("result/AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.AppendJSON(nil)
		}
	})
	b.Run("event/json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(ev)
		}
	})
	b.Run("event/AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = ev.AppendJSON(nil)
		}
	})
}
