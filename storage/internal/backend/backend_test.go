package backend

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

func TestCheckSave(t *testing.T) {
	valid := agent.New("a1", 1_700_000_000_000)
	badSnap := agent.New("a1", 1_700_000_000_000)
	badSnap.Status = "no-such-status"
	badID := agent.New("a1", 1_700_000_000_000)
	badID.AgentID = "../x"
	live := context.Background()
	cancelled, cancel := context.WithCancel(live)
	cancel()
	cases := []struct {
		name    string
		ctx     context.Context
		snap    *agent.Snapshot
		is      error  // the error wraps it; nil: no error
		message string // the error starts with it
	}{
		{"valid", live, valid, nil, ""},
		{"nil snapshot", live, nil, nil, "x: save: nil snapshot"},
		{"invalid id", live, badID, agent.ErrInvalidID, "x: save: "},
		{"invalid snapshot", live, badSnap, agent.ErrInvalidSnapshot, "x: save a1: "},
		{"cancelled", cancelled, valid, context.Canceled, "x: save a1: "},
		{"invalid id before cancelled", cancelled, badID, agent.ErrInvalidID, "x: save: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckSave(tc.ctx, "x", tc.snap)
			if tc.message == "" {
				if err != nil {
					t.Fatalf("CheckSave = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.message) {
				t.Fatalf("CheckSave = %v; want an error starting %q", err, tc.message)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Fatalf("CheckSave = %v; want it to wrap %v", err, tc.is)
			}
		})
	}
}

func TestAgents(t *testing.T) {
	type state struct{ id string }
	newState := func(id string) *state { return &state{id: id} }
	var a Agents[state]

	if st, err := a.Get("x"); st != nil || err != nil {
		t.Fatalf("Get on the zero value = %v, %v; want nil, nil", st, err)
	}
	st, err := a.GetOrAdd("x", newState)
	if err != nil || st == nil || st.id != "x" {
		t.Fatalf("GetOrAdd = %v, %v", st, err)
	}
	if again, _ := a.GetOrAdd("x", newState); again != st {
		t.Fatal("GetOrAdd made a second state for the same id")
	}
	if got, _ := a.Get("x"); got != st {
		t.Fatal("Get does not return what GetOrAdd added")
	}
	other := &state{id: "y"}
	a.Set("y", other)
	if got, _ := a.Get("y"); got != other {
		t.Fatal("Get does not return what Set stored")
	}
	a.Set("y", nil)
	if got, _ := a.Get("y"); got != nil {
		t.Fatal("Set(nil) did not forget the state")
	}
	var zero Agents[state]
	zero.Set("z", other) // Set on the zero value makes the map
	if got, _ := zero.Get("z"); got != other {
		t.Fatal("Set on the zero value lost the state")
	}
	if zero.Closed() {
		t.Fatal("the zero value is closed")
	}

	held, first := a.Close()
	if !first || !reflect.DeepEqual(held, map[string]*state{"x": st}) {
		t.Fatalf("Close = %v, %v; want the states and true", held, first)
	}
	if held, first := a.Close(); held != nil || first {
		t.Fatalf("second Close = %v, %v; want nil, false", held, first)
	}
	if !a.Closed() {
		t.Fatal("Closed is false after Close")
	}
	if got, err := a.Get("x"); got != nil || !errors.Is(err, plugin.ErrClosed) {
		t.Fatalf("Get after Close = %v, %v; want ErrClosed", got, err)
	}
	if got, err := a.GetOrAdd("w", newState); got != nil || !errors.Is(err, plugin.ErrClosed) {
		t.Fatalf("GetOrAdd after Close = %v, %v; want ErrClosed", got, err)
	}
	a.Set("x", st) // no effect, no panic
	if _, err := a.Get("x"); !errors.Is(err, plugin.ErrClosed) {
		t.Fatal("Set after Close reopened the map")
	}
}

func TestAgentsConcurrent(t *testing.T) {
	var a Agents[int]
	var wg sync.WaitGroup
	got := make([]*int, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], _ = a.GetOrAdd("same", func(string) *int { return new(int) })
		}()
	}
	wg.Wait()
	for _, p := range got {
		if p != got[0] {
			t.Fatal("concurrent GetOrAdd made more than one state")
		}
	}
}

func TestRetention(t *testing.T) {
	def := plugin.DefaultRetention
	cases := []struct {
		in, want plugin.Retention
	}{
		{plugin.Retention{}, def},
		{plugin.Retention{MaxTasks: 5}, plugin.Retention{MaxTasks: 5, MaxAgeMs: def.MaxAgeMs}},
		{plugin.Retention{MaxAgeMs: 1000}, plugin.Retention{MaxTasks: def.MaxTasks, MaxAgeMs: 1000}},
		{plugin.Retention{MaxTasks: -1, MaxAgeMs: -1}, plugin.Retention{MaxTasks: -1, MaxAgeMs: -1}},
		{plugin.Retention{MaxTasks: 7, MaxAgeMs: 3}, plugin.Retention{MaxTasks: 7, MaxAgeMs: 3}},
	}
	for _, tc := range cases {
		if got := Retention(tc.in); got != tc.want {
			t.Errorf("Retention(%+v) = %+v; want %+v", tc.in, got, tc.want)
		}
	}
}

func TestParseRetention(t *testing.T) {
	start := plugin.Retention{MaxTasks: 1, MaxAgeMs: 2}
	cases := []struct {
		query   string
		want    plugin.Retention
		rest    url.Values
		wantErr string // ParseRetention's error contains it
		strict  string // OnlyRetention's error contains it (also when wantErr is set)
	}{
		{query: "", want: start, rest: url.Values{}},
		{query: "retention_tasks=7&retention_age=1h", want: plugin.Retention{MaxTasks: 7, MaxAgeMs: 3_600_000}, rest: url.Values{}},
		{query: "retention_tasks=-1&retention_age=-1ms", want: plugin.Retention{MaxTasks: -1, MaxAgeMs: -1}, rest: url.Values{}},
		{query: "retention_tasks=3&retention_tasks=9", want: plugin.Retention{MaxTasks: 9, MaxAgeMs: 2}, rest: url.Values{}},
		{query: "retention_age=90s&prefix=p:&dial_timeout=2s", want: plugin.Retention{MaxTasks: 1, MaxAgeMs: 90_000},
			rest: url.Values{"prefix": {"p:"}, "dial_timeout": {"2s"}}, strict: `unknown parameter "dial_timeout" (known: retention_tasks, retention_age)`},
		{query: "zeta=1&alpha=2", want: start, rest: url.Values{"zeta": {"1"}, "alpha": {"2"}}, strict: `unknown parameter "alpha"`},
		{query: "retention_tasks=many", wantErr: `retention_tasks="many": want a number of tasks`},
		{query: "retention_age=7d", wantErr: `retention_age="7d": want a duration such as 168h`},
	}
	for _, tc := range cases {
		t.Run(tc.query, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			before := url.Values{}
			for k, v := range q {
				before[k] = v
			}
			r := start
			rest, err := ParseRetention(q, &r)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseRetention error %v; want %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatalf("ParseRetention: %v", err)
			default:
				if r != tc.want || !reflect.DeepEqual(rest, tc.rest) {
					t.Fatalf("ParseRetention = %+v, rest %v; want %+v, rest %v", r, rest, tc.want, tc.rest)
				}
			}
			if !reflect.DeepEqual(q, before) {
				t.Fatalf("ParseRetention changed its query: %v, was %v", q, before)
			}

			r = start
			err = OnlyRetention(q, &r)
			want := tc.strict
			if want == "" {
				want = tc.wantErr
			}
			switch {
			case want != "":
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("OnlyRetention error %v; want %q", err, want)
				}
			case err != nil:
				t.Fatalf("OnlyRetention: %v", err)
			case r != tc.want:
				t.Fatalf("OnlyRetention = %+v; want %+v", r, tc.want)
			}
		})
	}
}

func TestPathURL(t *testing.T) {
	env := plugin.Env{DataDir: filepath.Join("data", "dir")}
	cases := []struct {
		url     string
		want    string
		tasks   int // Retention.MaxTasks read
		wantErr string
	}{
		{"x://", filepath.Join("data", "dir", "def"), 0, ""},
		{"x:///abs/dir", "/abs/dir", 0, ""},
		{"x://rel/dir", "rel/dir", 0, ""},
		{"x:rel", "rel", 0, ""},
		{"x://rel?retention_tasks=3", "rel", 3, ""},
		{"x://?retention_tasks=3", filepath.Join("data", "dir", "def"), 3, ""},
		{"x:///abs?bogus=1", "", 0, `unknown parameter "bogus"`},
		{"x:///abs?retention_age=soon", "", 0, `retention_age="soon"`},
	}
	for _, tc := range cases {
		t.Run(tc.url, func(t *testing.T) {
			u, err := url.Parse(tc.url)
			if err != nil {
				t.Fatal(err)
			}
			var r plugin.Retention
			got, err := PathURL(u, env, "def", &r)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("PathURL error %v; want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want || r.MaxTasks != tc.tasks {
				t.Fatalf("PathURL = %q, %+v, %v; want %q, %d tasks", got, r, err, tc.want, tc.tasks)
			}
		})
	}
}

func TestUnindexed(t *testing.T) {
	outbox := func(seqs ...uint64) []agent.Result {
		var out []agent.Result
		for _, s := range seqs {
			out = append(out, agent.Result{Seq: s, TaskID: "t" + string(rune('0'+s))})
		}
		return out
	}
	noTask := outbox(4, 5, 6)
	noTask[1].TaskID = ""
	cases := []struct {
		name       string
		outbox     []agent.Result
		nextResult uint64 // Snapshot.NextResultSeq
		mark       uint64
		want       []uint64 // Seqs returned
		wantMark   uint64
	}{
		{"empty outbox", nil, 0, 3, nil, 3},
		{"all new", outbox(1, 2), 3, 0, []uint64{1, 2}, 2},
		{"some indexed", outbox(2, 3, 4), 5, 2, []uint64{3, 4}, 4},
		{"all indexed", outbox(2, 3), 4, 3, nil, 3},
		{"no task id is never indexed", noTask, 7, 3, []uint64{4, 6}, 6},
		{"NextResultSeq unknown (0)", outbox(1, 2, 3), 0, 2, []uint64{3}, 3},
		{"NextResultSeq above the mark", outbox(4), 5, 3, []uint64{4}, 4},
		{"restored from an older generation", outbox(2, 3), 4, 9, []uint64{2, 3}, 3},
		{"restored, empty outbox", nil, 4, 9, nil, 3},
		{"restored to NextResultSeq equal to the mark", outbox(5), 9, 9, []uint64{5}, 8},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			snap := agent.New("a", 1)
			snap.Outbox = tc.outbox
			snap.NextResultSeq = tc.nextResult
			got, mark := Unindexed(snap, tc.mark)
			var seqs []uint64
			for _, r := range got {
				seqs = append(seqs, r.Seq)
				if i := slices.IndexFunc(snap.Outbox, func(o agent.Result) bool { return o.Seq == r.Seq }); r != &snap.Outbox[i] {
					t.Fatalf("result %d does not point into the outbox", r.Seq)
				}
			}
			if !reflect.DeepEqual(seqs, tc.want) || mark != tc.wantMark {
				t.Fatalf("Unindexed = %v, mark %d; want %v, mark %d", seqs, mark, tc.want, tc.wantMark)
			}
		})
	}
}

func TestPruneFor(t *testing.T) {
	const now = 1_700_000_000_000
	cases := []struct {
		name  string
		r     plugin.Retention
		added int
		want  Prune
	}{
		{"both bounds", plugin.Retention{MaxTasks: 50, MaxAgeMs: 3_600_000}, 0, Prune{MaxTasks: 50, Cutoff: now - 3_600_000, Budget: PruneBatch}},
		{"budget grows with what is added", plugin.Retention{MaxTasks: 50, MaxAgeMs: 1}, 10, Prune{MaxTasks: 50, Cutoff: now - 1, Budget: PruneBatch + 10}},
		{"no bounds", plugin.Retention{MaxTasks: -1, MaxAgeMs: -1}, 1, Prune{MaxTasks: -1, Cutoff: -1, Budget: PruneBatch + 1}},
		{"zero is no bound", plugin.Retention{}, 0, Prune{MaxTasks: -1, Cutoff: -1, Budget: PruneBatch}},
		{"age longer than the clock", plugin.Retention{MaxTasks: 1, MaxAgeMs: now + 5}, 0, Prune{MaxTasks: 1, Cutoff: 0, Budget: PruneBatch}},
	}
	for _, tc := range cases {
		if got := PruneFor(tc.r, now, tc.added); got != tc.want {
			t.Errorf("%s: PruneFor = %+v; want %+v", tc.name, got, tc.want)
		}
	}
}

func TestRecord(t *testing.T) {
	magic := [4]byte{'T', 'E', 'S', 'T'}
	// The CRC-32C of "123456789" is e3069283: the check value of the
	// Castagnoli polynomial.
	rec := EncodeRecord(magic, []byte("1234"), nil, []byte("56789"))
	if got, want := hex.EncodeToString(rec), hex.EncodeToString([]byte("TEST\xe3\x06\x92\x83123456789")); got != want {
		t.Fatalf("EncodeRecord = %s; want %s", got, want)
	}
	if single := EncodeRecord(magic, []byte("123456789")); !bytes.Equal(single, rec) {
		t.Fatal("a body in one part and in three differ")
	}
	cases := []struct {
		name    string
		b       []byte
		minBody int
		want    string // the body; "" with err
		err     string
	}{
		{"good", rec, 0, "123456789", ""},
		{"good at its minimum", rec, 9, "123456789", ""},
		{"empty body", EncodeRecord(magic), 0, "", ""},
		{"shorter than the minimum", rec, 10, "", "record of 17 bytes is too short"},
		{"shorter than the header", rec[:7], 0, "", "record of 7 bytes is too short"},
		{"other magic", append([]byte("BEST"), rec[4:]...), 0, "", `record starts with "BEST", not "TEST"`},
		{"flipped body", append(bytes.Clone(rec[:16]), '8'), 0, "", "record crc32c"},
		{"flipped checksum", append([]byte("TEST\xe3\x06\x92\x84"), rec[8:]...), 0, "", "stored e3069284"},
		{"truncated", rec[:len(rec)-1], 0, "", "record crc32c"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body, err := OpenRecord(magic, tc.b, tc.minBody)
			if tc.err != "" {
				if !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("OpenRecord error %v; want one wrapping ErrChecksum with %q", err, tc.err)
				}
				return
			}
			if err != nil || string(body) != tc.want {
				t.Fatalf("OpenRecord = %q, %v; want %q", body, err, tc.want)
			}
		})
	}
}

func TestJSON(t *testing.T) {
	type value struct {
		A string `json:"a"`
	}
	b, sum, err := EncodeJSON(value{A: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b[4:]), `{"a":"x"}`; got != want {
		t.Fatalf("JSON part %s; want %s", got, want)
	}
	if sum != uint32(b[0])<<24|uint32(b[1])<<16|uint32(b[2])<<8|uint32(b[3]) {
		t.Fatal("the returned checksum is not the stored one")
	}
	if _, _, err := EncodeJSON(func() {}); err == nil {
		t.Fatal("EncodeJSON of a func: no error")
	}
	notJSON := EncodeRecord([4]byte{}, []byte("{nope"))[4:] // a good checksum of bad JSON
	cases := []struct {
		name     string
		b        []byte
		err      string
		checksum bool // the error wraps ErrChecksum
	}{
		{"good", b, "", false},
		{"short", b[:3], "item of 3 bytes is too short", true},
		{"flipped", append(bytes.Clone(b[:len(b)-2]), 'y', '}'), "item crc32c", true},
		{"truncated", b[:len(b)-1], "item crc32c", true},
		{"not JSON", notJSON, "item: ", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var v value
			got, err := DecodeJSON("item", tc.b, &v)
			if tc.err == "" {
				if err != nil || v.A != "x" || got != sum {
					t.Fatalf("DecodeJSON = %08x, %+v, %v", got, v, err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.err) || errors.Is(err, ErrChecksum) != tc.checksum {
				t.Fatalf("DecodeJSON error %v; want %q (wrapping ErrChecksum: %v)", err, tc.err, tc.checksum)
			}
		})
	}
}

// TestSealFrame: a frame sealed in place is the frame AppendFrame appends.
func TestSealFrame(t *testing.T) {
	for _, payload := range []string{"", "x", `{"seq":1,"task_id":"t"}`, strings.Repeat("p", 5000)} {
		for _, key := range []string{"", "k", "\x03\x00\x00\x00\x00\x00\x00\x00\x07"} {
			want := AppendFrame(nil, []byte(key), []byte(payload))
			got := SealFrame(append(make([]byte, FrameHeader), payload...), []byte(key))
			if !bytes.Equal(got, want) {
				t.Fatalf("key %q, payload of %d bytes: SealFrame % x, AppendFrame % x", key, len(payload), got[:FrameHeader], want[:FrameHeader])
			}
			if p, err := OpenFrame([]byte(key), got); err != nil || string(p) != payload {
				t.Fatalf("key %q: OpenFrame: %q, %v", key, p, err)
			}
		}
	}
}
