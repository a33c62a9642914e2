// Package storagetest is the conformance suite every storage backend runs,
// and the test machinery the backends share: the crash test (RunCrash), the
// Save benchmark (BenchmarkSave) and small helpers (MustEqual, LogBuffer).
//
// A backend's test calls Run with a Harness; the suite drives it through real
// files (or a real server) in t.TempDir and checks the promises of
// plugin.Storage: durable round trips, overwrite, delete, missing agents,
// concurrent agents, large histories, corruption detected and answered with
// the last good generation or ErrCorrupt, and cancelled contexts. Backends
// that also implement plugin.TaskIndex or plugin.Lister are checked for those
// too.
//
// Snapshots are compared as contract JSON: agent.Encode of what Load returns
// must equal agent.Encode of what was saved, byte for byte, and the two must
// be reflect.DeepEqual once both went through a JSON round trip (which turns
// every JSON number into float64, and a nil list or map into an empty one).
// HistorySeq and QueueSeq are not contract JSON: a backend may return them
// as zero, but when it returns them nonzero they must be what was saved.
package storagetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// Harness adapts one backend to the suite.
type Harness struct {
	// Open opens the backend rooted at dir. Calling it again with the same
	// dir after Close must see what was saved before (a restart).
	Open func(t *testing.T, dir string) plugin.Storage

	// CorruptLatest damages the newest stored generation of agentID (flips
	// bytes inside its record) while the store is closed. Load must then
	// return the previous generation. Nil for a backend that keeps no
	// previous generation.
	CorruptLatest func(t *testing.T, dir, agentID string)

	// CorruptAll damages every stored generation of agentID while the store
	// is closed. Load must then fail with an error wrapping ErrCorrupt.
	CorruptAll func(t *testing.T, dir, agentID string)

	// Files returns the files under dir in which the backend keeps
	// agentID, for the random damage case. Nil for a backend without files
	// (Redis).
	Files func(dir, agentID string) []string

	// TryOpen opens like Open but returns its error, for a backend whose
	// Open reads the files (SQLite): refusing a damaged file there is
	// fine. Nil means Open.
	TryOpen func(t *testing.T, dir string) (plugin.Storage, error)
}

// Run runs the whole suite against h. Every subtest works in its own
// t.TempDir and closes the stores it opens through t.Cleanup.
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("storagetest: Harness.Open is nil")
	}
	tests := []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"RoundTrip", testRoundTrip},
		{"NotFound", testNotFound},
		{"Overwrite", testOverwrite},
		{"Replace", testReplace},
		{"Delete", testDelete},
		{"Reopen", testReopen},
		{"ConcurrentAgents", testConcurrentAgents},
		{"LargeHistory", testLargeHistory},
		{"CorruptLatest", testCorruptLatest},
		{"CorruptAll", testCorruptAll},
		{"RandomDamage", testRandomDamage},
		{"CancelledContext", testCancelledContext},
		{"InvalidAgentID", testInvalidAgentID},
		{"Closed", testClosed},
		{"TaskIndex", testTaskIndex},
		{"Lister", testLister},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, h) })
	}
}

// baseMs is the timestamp of tick 0 of every sample (2023-11-14, Unix ms).
const baseMs int64 = 1_700_000_000_000

// Sample returns a snapshot of agentID at tick that uses every field of the
// contract and every optional addition: a history with each role, working
// variables of each JSON type (string, number, bool, null, nested map and
// list), queued events, outbox results, a pending action, recent event ids
// and a session id. The same arguments always give the same snapshot.
//
// The history (5 messages) and the queue (3 events) slide with the tick:
// HistorySeq and QueueSeq are tick, and an element's content depends only on
// its position. So Samples of one agent saved in increasing tick order keep
// the kernel's promise that a list only grows at its back and shrinks at its
// front and never changes an element, which a backend may rely on. Tests of
// other packages use Sample as a realistic snapshot.
func Sample(agentID string, tick uint64) *agent.Snapshot {
	ms := baseMs + int64(tick)*1000
	task := fmt.Sprintf("task-%d", tick)
	s := agent.New(agentID, ms)
	s.TickIndex = tick
	s.Status = agent.StatusRunningTool
	s.SessionID = "session-" + agentID
	s.HistorySeq = tick
	for pos := tick; pos < tick+5; pos++ {
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, sampleMessage(pos))
	}
	s.Memory.WorkingVariables = map[string]any{
		"name":    "starry",
		"count":   int(tick),
		"ratio":   0.25,
		"big":     1e21,
		"enabled": true,
		"nothing": nil,
		"nested": map[string]any{
			"list": []any{"a", 1, false, map[string]any{"k": "v"}},
			"deep": map[string]any{"deeper": map[string]any{"x": -1.5}},
		},
	}
	s.QueueSeq = tick
	for pos := tick; pos < tick+3; pos++ {
		s.EventQueueBackup = append(s.EventQueueBackup, sampleEvent(pos))
	}
	s.Outbox = []agent.Result{{
		Seq: tick + 1, TaskID: task, AgentID: agentID, Status: agent.ResultDone,
		Output: json.RawMessage(`{"text":"It is noon."}`), TickIndex: tick, Source: "mqtt", FinishedAt: ms,
	}, {
		Seq: tick + 2, TaskID: task + "-b", AgentID: agentID, Status: agent.ResultFailed,
		Error: "tool http_get: timeout", TickIndex: tick, FinishedAt: ms,
	}}
	s.PendingAction = &agent.PendingAction{
		EventID: fmt.Sprintf("evt-%d", tick), TaskID: task, Step: 1, Tool: "http_get",
		Args:      json.RawMessage(`{"url":"http://example.invalid/"}`),
		Completed: []agent.ToolResult{{Tool: "clock", Output: json.RawMessage(`"12:00"`)}, {Tool: "dns", Error: "nxdomain"}},
		StartedAt: ms - 5,
	}
	s.RecentEventIDs = []string{"evt-0", fmt.Sprintf("evt-%d", tick)}
	s.NextResultSeq = tick + 3
	return s
}

// sampleMessage is the history message at position pos of every Sample.
func sampleMessage(pos uint64) agent.Message {
	task := fmt.Sprintf("task-%d", pos/5)
	switch pos % 5 {
	case 0:
		return agent.Message{Role: "system", Content: fmt.Sprintf("You are a careful test agent (%d).", pos)}
	case 1:
		return agent.Message{Role: "user", Content: fmt.Sprintf("What is the time? (%d)", pos), TaskID: task}
	case 2:
		return agent.Message{Role: "assistant", Content: "I will call the clock tool.", TaskID: task}
	case 3:
		return agent.Message{Role: "tool", Name: "clock", Content: fmt.Sprintf(`{"now":"2024-01-01T00:00:%02dZ"}`, pos%60), TaskID: task}
	default:
		return agent.Message{Role: "assistant", TaskID: task,
			Content: fmt.Sprintf("Ünïcødé, \"quotes\", <tags> & \\ back\nslash\ttab \u2028 😀 %d", pos)}
	}
}

// sampleEvent is the queued event at position pos of every Sample.
func sampleEvent(pos uint64) agent.Event {
	switch pos % 3 {
	case 0:
		return agent.Event{Source: "mqtt", Type: "task", Payload: json.RawMessage(fmt.Sprintf(`{"prompt":"next","n":%d}`, pos)),
			ID: fmt.Sprintf("evt-%d", pos), ReceivedAt: baseMs + int64(pos)}
	case 1:
		return agent.Event{Source: "cli", Type: "signal", Payload: json.RawMessage(`"stop"`), ID: fmt.Sprintf("evt-%d", pos)}
	default:
		return agent.Event{Source: "timer", Type: "tick", Payload: json.RawMessage(`null`)}
	}
}

// ctx is the live context of the suite.
var ctx = context.Background()

// open opens a store on dir and closes it when the test ends (a store the
// test closed itself may answer that second Close with nil or ErrClosed).
func open(t *testing.T, h Harness, dir string) plugin.Storage {
	t.Helper()
	s := h.Open(t, dir)
	if s == nil {
		t.Fatal("Harness.Open returned nil")
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, plugin.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// reopen closes s and opens dir again, as a restarted process would.
func reopen(t *testing.T, h Harness, s plugin.Storage, dir string) plugin.Storage {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return open(t, h, dir)
}

func mustSave(t *testing.T, s plugin.Storage, snap *agent.Snapshot) {
	t.Helper()
	if err := s.Save(ctx, snap); err != nil {
		t.Fatalf("Save %s tick %d: %v", snap.AgentID, snap.TickIndex, err)
	}
}

func mustLoad(t *testing.T, s plugin.Storage, id string) *agent.Snapshot {
	t.Helper()
	got, err := s.Load(ctx, id)
	if err != nil {
		t.Fatalf("Load %s: %v", id, err)
	}
	if got == nil {
		t.Fatalf("Load %s: nil snapshot, want one", id)
	}
	return got
}

// saveAndCheck saves snap and loads it back.
func saveAndCheck(t *testing.T, s plugin.Storage, snap *agent.Snapshot) {
	t.Helper()
	mustSave(t, s, snap)
	checkLoad(t, s, snap)
}

// reopenAndCheck reopens the store, as reopen does, and checks that Load
// returns want.
func reopenAndCheck(t *testing.T, h Harness, s plugin.Storage, dir string, want *agent.Snapshot) plugin.Storage {
	t.Helper()
	s = reopen(t, h, s, dir)
	checkLoad(t, s, want)
	return s
}

// checkLoad loads id and fails the test unless it equals want.
func checkLoad(t *testing.T, s plugin.Storage, want *agent.Snapshot) {
	t.Helper()
	checkEqual(t, mustLoad(t, s, want.AgentID), want)
}

// checkEqual compares got with want as the package comment describes.
func checkEqual(t *testing.T, got, want *agent.Snapshot) {
	t.Helper()
	if err := diff(got, want); err != nil {
		t.Fatal(err)
	}
}

// diff returns nil when got equals want as the package comment describes.
// It does not touch t, so goroutines may call it.
func diff(got, want *agent.Snapshot) error {
	if got == nil {
		return fmt.Errorf("%s: got a nil snapshot, want tick %d", want.AgentID, want.TickIndex)
	}
	gj, err := agent.Encode(got)
	if err != nil {
		return fmt.Errorf("encode loaded snapshot: %v", err)
	}
	wj, err := agent.Encode(want)
	if err != nil {
		return fmt.Errorf("encode saved snapshot: %v", err)
	}
	if string(gj) != string(wj) {
		return fmt.Errorf("%s: loaded snapshot differs from the saved one (tick %d, want tick %d)\n%s",
			want.AgentID, got.TickIndex, want.TickIndex, firstDifference(gj, wj))
	}
	gn, wn := normalise(gj), normalise(wj)
	if !reflect.DeepEqual(gn, wn) {
		return fmt.Errorf("%s: loaded snapshot is not DeepEqual to the saved one after a JSON round trip:\n got %#v\nwant %#v",
			want.AgentID, gn, wn)
	}
	if got.HistorySeq != 0 && got.HistorySeq != want.HistorySeq {
		return fmt.Errorf("%s: HistorySeq = %d, want %d (or 0)", want.AgentID, got.HistorySeq, want.HistorySeq)
	}
	if got.QueueSeq != 0 && got.QueueSeq != want.QueueSeq {
		return fmt.Errorf("%s: QueueSeq = %d, want %d (or 0)", want.AgentID, got.QueueSeq, want.QueueSeq)
	}
	return nil
}

// normalise decodes contract JSON into a Snapshot; a panic here is a bug in
// the suite, since the JSON came out of agent.Encode.
func normalise(data []byte) *agent.Snapshot {
	var s agent.Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		panic(fmt.Sprintf("storagetest: normalise: %v", err))
	}
	return &s
}

// firstDifference shows where two JSON texts part.
func firstDifference(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(0, i-60)
	return fmt.Sprintf("at byte %d (got %d bytes, want %d):\n got …%s…\nwant …%s…",
		i, len(got), len(want), excerpt(got, from, i+60), excerpt(want, from, i+60))
}

func excerpt(b []byte, from, to int) string {
	return string(b[min(from, len(b)):min(to, len(b))])
}

func testRoundTrip(t *testing.T, h Harness) {
	s := open(t, h, t.TempDir())

	nilLists := Sample("nil-lists", 3)
	nilLists.Memory.ShortTermHistory = nil
	nilLists.Memory.WorkingVariables = nil
	nilLists.EventQueueBackup = nil
	nilLists.Outbox = nil
	nilLists.PendingAction = nil
	nilLists.RecentEventIDs = nil

	emptyLists := agent.New("empty-lists", baseMs)

	seqs := Sample("with-seqs", 9)
	seqs.HistorySeq = 1_000_003
	seqs.QueueSeq = 1 << 40

	bareV0 := &agent.Snapshot{ // the specification's JSON, schema version 0
		AgentID: "v0:agent_1.x", TickIndex: 12, Timestamp: baseMs, Status: agent.StatusStopped,
		Memory: agent.Memory{
			ShortTermHistory: []agent.Message{{Role: "user", Content: "hi"}},
			WorkingVariables: map[string]any{"a": "b"},
		},
		EventQueueBackup: []agent.Event{{Source: "s", Type: "t", Payload: json.RawMessage(`[1,2,3]`)}},
	}

	maxID := Sample(strings.Repeat("m", agent.MaxIDLen), 1)

	cases := []struct {
		name string
		snap *agent.Snapshot
	}{
		{"full sample", Sample("full-sample", 42)},
		{"nil lists", nilLists},
		{"blank agent", emptyLists},
		{"nonzero seqs", seqs},
		{"bare v0", bareV0},
		{"longest id", maxID},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.snap.Clone()
			mustSave(t, s, tc.snap)
			checkEqual(t, tc.snap, want) // Save must not change its argument
			checkLoad(t, s, want)
		})
	}
}

func testNotFound(t *testing.T, h Harness) {
	s := open(t, h, t.TempDir())
	mustSave(t, s, Sample("someone-else", 1))
	for i := 0; i < 2; i++ {
		got, err := s.Load(ctx, "nobody")
		if err != nil || got != nil {
			t.Fatalf("Load of an unknown agent = %v, %v; want nil, nil", got, err)
		}
		if err := s.Delete(ctx, "nobody"); err != nil {
			t.Fatalf("Delete of an unknown agent: %v", err)
		}
	}
}

// slider plays the kernel: every tick it appends to the history and the
// queue, drops the front of the history beyond window and pops events, and
// keeps HistorySeq and QueueSeq the absolute positions of the first elements.
type slider struct {
	snap   *agent.Snapshot
	window int
}

func newSlider(id string, window int) *slider {
	s := agent.New(id, baseMs)
	s.Status = agent.StatusWaitingForEvent
	return &slider{snap: s, window: window}
}

// step advances one tick and returns a copy of the snapshot to save.
func (sl *slider) step() *agent.Snapshot {
	s := sl.snap
	s.TickIndex++
	tick := s.TickIndex
	s.Timestamp = baseMs + int64(tick)*1000
	s.Memory.WorkingVariables["tick"] = int(tick)
	// One or two messages a tick, of varying size.
	n := 1 + int(tick%2)
	for i := 0; i < n; i++ {
		pos := s.HistorySeq + uint64(len(s.Memory.ShortTermHistory))
		s.Memory.ShortTermHistory = append(s.Memory.ShortTermHistory, agent.Message{
			Role:    []string{"user", "assistant"}[pos%2],
			Content: fmt.Sprintf("message %d of tick %d %s", pos, tick, strings.Repeat("·", int(pos%97))),
			TaskID:  fmt.Sprintf("task-%d", tick),
		})
	}
	if drop := len(s.Memory.ShortTermHistory) - sl.window; drop > 0 {
		s.Memory.ShortTermHistory = s.Memory.ShortTermHistory[drop:]
		s.HistorySeq += uint64(drop)
	}
	// The queue gets an event on two ticks of three and loses one or two on
	// every other tick, so it grows, shrinks and empties.
	if tick%3 != 0 {
		pos := s.QueueSeq + uint64(len(s.EventQueueBackup))
		s.EventQueueBackup = append(s.EventQueueBackup, agent.Event{
			Source: "mqtt", Type: "task", ID: fmt.Sprintf("evt-%d", pos),
			Payload: json.RawMessage(fmt.Sprintf(`{"pos":%d}`, pos)), ReceivedAt: s.Timestamp,
		})
	}
	if tick%2 == 0 {
		pop := min(len(s.EventQueueBackup), 1+int(tick%4)/2)
		s.EventQueueBackup = s.EventQueueBackup[pop:]
		s.QueueSeq += uint64(pop)
	}
	return s.Clone()
}

// advance saves n steps of sl, loading each back, and returns the last.
func advance(t *testing.T, s plugin.Storage, sl *slider, n int) *agent.Snapshot {
	t.Helper()
	var last *agent.Snapshot
	for i := 0; i < n; i++ {
		last = sl.step()
		saveAndCheck(t, s, last)
	}
	return last
}

func testOverwrite(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)
	sl := newSlider("sliding", 50)
	last := advance(t, s, sl, 300)

	s = reopenAndCheck(t, h, s, dir, last)
	// Saving goes on after a restart, from what Load returned.
	last = advance(t, s, sl, 20)
	reopenAndCheck(t, h, s, dir, last)
}

// testReplace saves histories and queues that are not a continuation of the
// previous save (an imported snapshot, a cleared history): the backend must
// store exactly what it was given, and keep working incrementally after.
// Every replacement is one a backend that writes only appended elements can
// detect: a position moved back, a list cut at its back, or a different
// element at the last position the two saves share.
func testReplace(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)

	other := func(tag string, n int) []agent.Message {
		out := make([]agent.Message, n)
		for i := range out {
			out[i] = agent.Message{Role: "user", Content: fmt.Sprintf("%s %d", tag, i)}
		}
		return out
	}
	cases := []struct {
		name   string
		change func(s *agent.Snapshot)
	}{
		{"imported with seq reset to 0", func(s *agent.Snapshot) {
			s.Memory.ShortTermHistory = other("imported", 30)
			s.HistorySeq = 0
		}},
		{"same seq, other content", func(s *agent.Snapshot) {
			s.Memory.ShortTermHistory = other("rewritten", len(s.Memory.ShortTermHistory))
		}},
		{"cut at the back", func(s *agent.Snapshot) {
			s.Memory.ShortTermHistory = s.Memory.ShortTermHistory[:len(s.Memory.ShortTermHistory)/2]
		}},
		{"cleared", func(s *agent.Snapshot) {
			s.Memory.ShortTermHistory = []agent.Message{}
			s.EventQueueBackup = []agent.Event{}
		}},
		{"seq jumps past the end", func(s *agent.Snapshot) {
			s.HistorySeq += uint64(len(s.Memory.ShortTermHistory)) + 1000
			s.Memory.ShortTermHistory = other("after the gap", 7)
		}},
		{"queue replaced, seq back to 0", func(s *agent.Snapshot) {
			s.EventQueueBackup = []agent.Event{{Source: "import", Type: "task", Payload: json.RawMessage(`{}`), ID: "imported"}}
			s.QueueSeq = 0
		}},
		{"nil lists", func(s *agent.Snapshot) {
			s.Memory.ShortTermHistory = nil
			s.EventQueueBackup = nil
		}},
	}
	sl := newSlider("replaced", 20)
	for i := 0; i < 25; i++ {
		mustSave(t, s, sl.step())
	}
	for _, tc := range cases {
		var last *agent.Snapshot
		ok := t.Run(tc.name, func(t *testing.T) {
			snap := sl.step()
			tc.change(snap)
			sl.snap = snap.Clone()
			saveAndCheck(t, s, snap)
			// Continue incrementally from the replaced lists.
			last = advance(t, s, sl, 3)
		})
		if !ok {
			return
		}
		s = reopenAndCheck(t, h, s, dir, last)
	}
}

func testDelete(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)
	keep := Sample("keep", 1)
	mustSave(t, s, keep)
	sl := newSlider("doomed", 10)
	for i := 0; i < 15; i++ {
		mustSave(t, s, sl.step())
	}
	if err := s.Delete(ctx, "doomed"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if got, err := s.Load(ctx, "doomed"); err != nil || got != nil {
		t.Fatalf("Load after Delete = %v, %v; want nil, nil", got, err)
	}
	if err := s.Delete(ctx, "doomed"); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	checkLoad(t, s, keep)

	// A new agent of the same id starts from scratch.
	again := Sample("doomed", 1)
	saveAndCheck(t, s, again)
	next := Sample("doomed", 2)
	saveAndCheck(t, s, next)

	if err := s.Delete(ctx, "doomed"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	s = reopen(t, h, s, dir)
	if got, err := s.Load(ctx, "doomed"); err != nil || got != nil {
		t.Fatalf("Load after Delete and reopen = %v, %v; want nil, nil", got, err)
	}
	checkLoad(t, s, keep)
}

func testReopen(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)
	var want []*agent.Snapshot
	for i, id := range []string{"alpha", "beta", "gamma"} {
		snap := Sample(id, uint64(10*i+1))
		mustSave(t, s, snap)
		want = append(want, snap)
	}
	for i := 0; i < 2; i++ {
		s = reopen(t, h, s, dir)
		for _, w := range want {
			checkLoad(t, s, w)
		}
	}
}

func testConcurrentAgents(t *testing.T, h Harness) {
	const agents, saves = 32, 20
	dir := t.TempDir()
	s := open(t, h, dir)
	last := make([]*agent.Snapshot, agents)
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for i := 0; i < agents; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sl := newSlider(fmt.Sprintf("agent-%02d", i), 8+i)
			for j := 0; j < saves; j++ {
				snap := sl.step()
				if err := s.Save(ctx, snap); err != nil {
					errs <- fmt.Errorf("Save %s tick %d: %w", snap.AgentID, snap.TickIndex, err)
					return
				}
				got, err := s.Load(ctx, snap.AgentID)
				if err != nil {
					errs <- fmt.Errorf("Load %s: %w", snap.AgentID, err)
					return
				}
				if err := diff(got, snap); err != nil {
					errs <- err
					return
				}
				last[i] = snap
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	for _, w := range last {
		checkLoad(t, s, w)
	}
	s = reopen(t, h, s, dir)
	for _, w := range last {
		checkLoad(t, s, w)
	}
}

func testLargeHistory(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)
	snap := Sample("large", 1)
	hist := make([]agent.Message, 5000)
	pad := strings.Repeat("0123456789abcdef", 64) // 1 KiB
	for i := range hist {
		hist[i] = agent.Message{Role: []string{"user", "assistant"}[i%2], Content: fmt.Sprintf("%05d %s", i, pad)}
	}
	snap.Memory.ShortTermHistory = hist
	saveAndCheck(t, s, snap)

	next := snap.Clone()
	next.TickIndex++
	next.Memory.ShortTermHistory = append(next.Memory.ShortTermHistory, agent.Message{Role: "user", Content: "one more"})
	saveAndCheck(t, s, next)

	slid := next.Clone()
	slid.TickIndex++
	slid.Memory.ShortTermHistory = append(slid.Memory.ShortTermHistory[2:], agent.Message{Role: "assistant", Content: "and another"})
	slid.HistorySeq += 2
	saveAndCheck(t, s, slid)

	reopenAndCheck(t, h, s, dir, slid)
}

func testCorruptLatest(t *testing.T, h Harness) {
	if h.CorruptLatest == nil {
		t.Skip("the backend keeps no previous generation")
	}
	dir := t.TempDir()
	s := open(t, h, dir)
	sl := newSlider("damaged", 10)
	for i := 0; i < 12; i++ {
		mustSave(t, s, sl.step())
	}
	a := sl.step()
	mustSave(t, s, a)
	b := sl.step()
	mustSave(t, s, b)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	h.CorruptLatest(t, dir, "damaged")

	s = open(t, h, dir)
	got, err := s.Load(ctx, "damaged")
	if err != nil {
		t.Fatalf("Load with a corrupt latest generation: %v; want the previous generation", err)
	}
	if got == nil {
		t.Fatal("Load with a corrupt latest generation returned nil; want the previous generation")
	}
	if got.TickIndex != a.TickIndex {
		t.Fatalf("Load returned tick %d; want the previous generation, tick %d", got.TickIndex, a.TickIndex)
	}
	checkEqual(t, got, a)

	// The agent goes on from the generation it got back.
	sl.snap = got.Clone()
	sl.snap.HistorySeq, sl.snap.QueueSeq = a.HistorySeq, a.QueueSeq
	c := advance(t, s, sl, 3)
	reopenAndCheck(t, h, s, dir, c)
}

func testCorruptAll(t *testing.T, h Harness) {
	if h.CorruptAll == nil {
		t.Skip("Harness.CorruptAll is nil")
	}
	dir := t.TempDir()
	s := open(t, h, dir)
	mustSave(t, s, Sample("ruined", 1))
	mustSave(t, s, Sample("ruined", 2))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	h.CorruptAll(t, dir, "ruined")

	s = open(t, h, dir)
	got, err := s.Load(ctx, "ruined")
	if !errors.Is(err, plugin.ErrCorrupt) {
		t.Fatalf("Load with every generation corrupt: error %v; want one wrapping ErrCorrupt", err)
	}
	if got != nil {
		t.Fatalf("Load with every generation corrupt returned a snapshot (tick %d) besides the error", got.TickIndex)
	}
}

func testCancelledContext(t *testing.T, h Harness) {
	s := open(t, h, t.TempDir())
	first := Sample("cancel", 1)
	mustSave(t, s, first)

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Save(cancelled, Sample("cancel", 2)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Save with a cancelled context: %v; want an error wrapping context.Canceled", err)
	}
	if got, err := s.Load(cancelled, "cancel"); !errors.Is(err, context.Canceled) || got != nil {
		t.Fatalf("Load with a cancelled context = %v, %v; want nil and an error wrapping context.Canceled", got, err)
	}
	checkLoad(t, s, first)

	third := Sample("cancel", 3)
	saveAndCheck(t, s, third)
}

func testInvalidAgentID(t *testing.T, h Harness) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s := open(t, h, dir)
	mustSave(t, s, Sample("valid", 1))

	ids := []string{
		"../x", "../../etc/cron.d/x", "/etc/passwd", "a/b", `a\b`, "a\x00b", ".hidden", "..", ".",
		"", " ", "a b", "ä", strings.Repeat("a", agent.MaxIDLen+1),
	}
	for _, id := range ids {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			snap := Sample("valid", 2)
			snap.AgentID = id
			if err := s.Save(ctx, snap); !errors.Is(err, agent.ErrInvalidID) {
				t.Errorf("Save: %v; want an error wrapping agent.ErrInvalidID", err)
			}
			if got, err := s.Load(ctx, id); !errors.Is(err, agent.ErrInvalidID) || got != nil {
				t.Errorf("Load = %v, %v; want nil and an error wrapping agent.ErrInvalidID", got, err)
			}
			if err := s.Delete(ctx, id); !errors.Is(err, agent.ErrInvalidID) {
				t.Errorf("Delete: %v; want an error wrapping agent.ErrInvalidID", err)
			}
			if ti, ok := s.(plugin.TaskIndex); ok {
				if _, err := ti.TaskResult(ctx, id, "task-1"); !errors.Is(err, agent.ErrInvalidID) {
					t.Errorf("TaskResult: %v; want an error wrapping agent.ErrInvalidID", err)
				}
			}
		})
	}

	err := filepath.WalkDir(parent, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path != parent && path != dir && !strings.HasPrefix(path, dir+string(filepath.Separator)) {
			t.Errorf("%s was created outside the store directory %s", path, dir)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkLoad(t, s, Sample("valid", 1))
}

func testClosed(t *testing.T, h Harness) {
	s := open(t, h, t.TempDir())
	mustSave(t, s, Sample("closed", 1))
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Save(ctx, Sample("closed", 2)); !errors.Is(err, plugin.ErrClosed) {
		t.Errorf("Save after Close: %v; want an error wrapping ErrClosed", err)
	}
	if got, err := s.Load(ctx, "closed"); !errors.Is(err, plugin.ErrClosed) || got != nil {
		t.Errorf("Load after Close = %v, %v; want nil and an error wrapping ErrClosed", got, err)
	}
	if err := s.Delete(ctx, "closed"); !errors.Is(err, plugin.ErrClosed) {
		t.Errorf("Delete after Close: %v; want an error wrapping ErrClosed", err)
	}
	if ti, ok := s.(plugin.TaskIndex); ok {
		if _, err := ti.TaskResult(ctx, "closed", "task-1"); !errors.Is(err, plugin.ErrClosed) {
			t.Errorf("TaskResult after Close: %v; want an error wrapping ErrClosed", err)
		}
	}
	if l, ok := s.(plugin.Lister); ok {
		if _, err := l.List(ctx); !errors.Is(err, plugin.ErrClosed) {
			t.Errorf("List after Close: %v; want an error wrapping ErrClosed", err)
		}
	}
}

func testTaskIndex(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)
	if _, ok := s.(plugin.TaskIndex); !ok {
		t.Skip("the backend does not implement plugin.TaskIndex")
	}
	index := func() plugin.TaskIndex { return s.(plugin.TaskIndex) }

	result := func(seq uint64, status string) agent.Result {
		return agent.Result{
			Seq: seq, TaskID: fmt.Sprintf("task-%03d", seq), AgentID: "indexed", Status: status,
			Output: json.RawMessage(fmt.Sprintf(`{"answer":%d}`, seq)), TickIndex: seq * 10,
			Source: "mqtt", FinishedAt: baseMs + int64(seq),
		}
	}
	var saved []agent.Result
	check := func(t *testing.T) {
		t.Helper()
		for _, want := range saved {
			got, err := index().TaskResult(ctx, "indexed", want.TaskID)
			if err != nil {
				t.Fatalf("TaskResult %s: %v", want.TaskID, err)
			}
			gj, _ := json.Marshal(got)
			wj, _ := json.Marshal(want)
			if string(gj) != string(wj) {
				t.Fatalf("TaskResult %s = %s; want %s", want.TaskID, gj, wj)
			}
		}
	}

	snap := Sample("indexed", 1)
	snap.Outbox = []agent.Result{result(1, agent.ResultDone), result(2, agent.ResultFailed)}
	saved = append(saved, snap.Outbox...)
	mustSave(t, s, snap)
	check(t)

	// Result 1 was delivered and left the outbox; 3 and 4 are new.
	snap = Sample("indexed", 2)
	snap.Outbox = []agent.Result{result(2, agent.ResultFailed), result(3, agent.ResultUnknownOutcome), result(4, agent.ResultDone)}
	saved = append(saved, snap.Outbox[1:]...)
	mustSave(t, s, snap)
	check(t)

	// Everything delivered.
	snap = Sample("indexed", 3)
	snap.Outbox = nil
	mustSave(t, s, snap)
	check(t)

	s = reopen(t, h, s, dir)
	check(t)
	mustSave(t, s, Sample("indexed", 4))
	check(t)

	for _, tc := range []struct{ agent, task string }{
		{"indexed", "no-such-task"},
		{"nobody", "task-001"},
	} {
		if _, err := index().TaskResult(ctx, tc.agent, tc.task); !errors.Is(err, plugin.ErrNotFound) {
			t.Errorf("TaskResult(%s, %s): %v; want an error wrapping ErrNotFound", tc.agent, tc.task, err)
		}
	}

	if err := s.Delete(ctx, "indexed"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := index().TaskResult(ctx, "indexed", "task-001"); !errors.Is(err, plugin.ErrNotFound) {
		t.Errorf("TaskResult after Delete: %v; want an error wrapping ErrNotFound", err)
	}
}

func testLister(t *testing.T, h Harness) {
	dir := t.TempDir()
	s := open(t, h, dir)
	if _, ok := s.(plugin.Lister); !ok {
		t.Skip("the backend does not implement plugin.Lister")
	}
	list := func(t *testing.T, want ...string) {
		t.Helper()
		got, err := s.(plugin.Lister).List(ctx)
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if len(got) == 0 && len(want) == 0 {
			return
		}
		if !slices.Equal(got, want) {
			t.Fatalf("List = %q; want %q", got, want)
		}
	}
	list(t)
	for _, id := range []string{"zulu", "alpha", "mike", "Bravo", "a.b:c-d_e"} {
		mustSave(t, s, Sample(id, 1))
	}
	if _, err := s.Load(ctx, "never-saved"); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if err := s.Delete(ctx, "mike"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	want := []string{"Bravo", "a.b:c-d_e", "alpha", "zulu"}
	list(t, want...)
	s = reopen(t, h, s, dir)
	list(t, want...)
}

// testRandomDamage damages the backend's files at random (bit flips, a cut,
// a zeroed 4 KiB page) while the store is closed, 40 times, each on a fresh
// copy. Each Load must return the newest generation, the one before it, or
// an error wrapping ErrCorrupt: never nil (a blank agent), never another
// error, never a panic.
func testRandomDamage(t *testing.T, h Harness) {
	if h.Files == nil {
		t.Skip("the backend keeps no files")
	}
	dir := t.TempDir()
	s := open(t, h, dir)
	sl := newSlider("hurt", 10)
	var prev, last *agent.Snapshot
	for i := 0; i < 15; i++ {
		prev, last = last, sl.step()
		mustSave(t, s, last)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	files := h.Files(dir, "hurt")
	if len(files) == 0 {
		t.Fatal("Harness.Files named no file")
	}
	rng := rand.New(rand.NewPCG(uint64(len(files)), 7))
	counts := map[string]int{}
	for i := 0; i < 40; i++ {
		cp := t.TempDir()
		CopyDir(t, dir, cp)
		rel, err := filepath.Rel(dir, files[rng.IntN(len(files))])
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(cp, rel)
		fi, err := os.Stat(path)
		if err != nil || fi.Size() == 0 {
			continue
		}
		what := DamageFile(t, path, fi.Size(), []Damage{BitFlip, Truncation, ZeroedPage}[rng.IntN(3)], rng)
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s, %s: Load panicked: %v", rel, what, r)
				}
			}()
			var st plugin.Storage
			var err error
			if h.TryOpen != nil {
				st, err = h.TryOpen(t, cp)
			} else {
				st = h.Open(t, cp)
			}
			var got *agent.Snapshot
			if err == nil {
				defer st.Close()
				got, err = st.Load(ctx, "hurt")
			}
			switch {
			case errors.Is(err, plugin.ErrCorrupt):
				counts["refused"]++
			case err != nil:
				t.Errorf("%s, %s: Load: %v; want a snapshot or ErrCorrupt", rel, what, err)
			case got == nil:
				t.Errorf("%s, %s: Load returned nil: a blank agent", rel, what)
			case got.TickIndex == last.TickIndex:
				counts["newest"]++
			case got.TickIndex == prev.TickIndex:
				counts["previous"]++
			default:
				t.Errorf("%s, %s: Load returned tick %d; want %d or %d", rel, what, got.TickIndex, last.TickIndex, prev.TickIndex)
			}
		}()
	}
	t.Logf("newest %d, previous %d, refused %d", counts["newest"], counts["previous"], counts["refused"])
}
