package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestWaves(t *testing.T) {
	devs := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("d%02d", i)
		}
		return out
	}
	for _, tc := range []struct {
		n      int
		stages string
		sizes  []int
	}{
		{1, DefaultStages, []int{1}},
		{3, DefaultStages, []int{1, 2}},        // a tenth of 3 is the canary
		{20, DefaultStages, []int{1, 1, 18}},   // 10% of 20 = 2
		{100, DefaultStages, []int{1, 9, 90}},  // canary, a tenth, the rest
		{101, DefaultStages, []int{1, 10, 90}}, // 10% of 101 rounds up to 11
		{5, "2,100%", []int{2, 3}},
		{5, "50%,100%", []int{3, 2}},
	} {
		stages, err := ParseStages(tc.stages)
		if err != nil {
			t.Fatal(err)
		}
		waves, err := Waves(devs(tc.n), stages)
		if err != nil {
			t.Fatal(err)
		}
		var sizes []int
		for _, w := range waves {
			sizes = append(sizes, len(w))
		}
		if !slices.Equal(sizes, tc.sizes) {
			t.Errorf("%d devices, %s: waves %v, want %v", tc.n, tc.stages, sizes, tc.sizes)
		}
	}
	for _, bad := range []string{"", "0,100%", "1,10%", "x,100%", "1,150%", "-1,100%", "NaN%,100%", "Inf%,100%"} {
		if _, err := ParseStages(bad); err == nil {
			t.Errorf("stages %q accepted", bad)
		}
	}
}

// TestStagedUpdateHalts: the canary commits; in the next wave one device
// rolls back by itself after its health check while another commits: the
// rollout halts there, the later wave is never started, and the device of
// the failed wave that committed is updated back to the previous release.
func TestStagedUpdateHalts(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	update := func(_ context.Context, dev, url string) (*Outcome, error) {
		mu.Lock()
		calls = append(calls, dev+" "+url)
		mu.Unlock()
		switch {
		case dev == "d2" && url == "new":
			return &Outcome{Device: dev, State: UpdateRolledBack, From: "1", To: "2", Running: "1", Reason: "crash loop"}, nil
		case dev == "d3" && url == "new":
			return nil, errors.New("no outcome within 10m")
		case url == "old":
			return &Outcome{Device: dev, State: UpdateCommitted, From: "2", To: "1", Running: "1"}, nil
		}
		return &Outcome{Device: dev, State: UpdateCommitted, From: "1", To: "2", Running: "2"}, nil
	}
	var out bytes.Buffer
	err := StagedUpdate{Devices: []string{"d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7", "d8", "d9"},
		Stages: []string{"1", "40%", "100%"}, URL: "new", RollbackURL: "old", Update: update, Out: &out}.Run(context.Background())
	if !errors.Is(err, ErrWaveFailed) {
		t.Fatalf("err %v\n%s", err, &out)
	}
	slices.Sort(calls)
	want := []string{"d0 new", "d1 new", "d1 old", "d2 new", "d3 new"}
	if !slices.Equal(calls, want) {
		t.Errorf("calls %v, want %v\n%s", calls, want, &out)
	}
	for _, line := range []string{
		"fleet update: 10 devices in 3 waves (1, 40%, 100%) from new",
		"wave 1/3: d0",
		"  d0: committed (1 → 2, running 2)",
		"wave 2/3: d1 d2 d3",
		"  d2: rolled_back (1 → 2, running 1): crash loop",
		"  d3: failed: no outcome within 10m",
		"wave 2/3 failed on d2 d3: halted; 6 devices of later waves not updated",
		"rolling back wave 2/3 from old: d1",
		"  d1: committed (2 → 1, running 1)",
	} {
		if !strings.Contains(out.String(), line+"\n") {
			t.Errorf("no line %q in\n%s", line, &out)
		}
	}
}

// FuzzStages: ParseStages never panics, and the waves of stages it accepts
// cover every device once, in order, none empty.
func FuzzStages(f *testing.F) {
	for _, s := range []string{DefaultStages, "2,100%", "50%,100%", "0,100%", "1,,100%", "1e9,100%", "100%", "-5%,100%", "NaN%,100%"} {
		f.Add(s, 7)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		stages, err := ParseStages(s)
		if err != nil {
			return
		}
		n = n%300 + 300
		n %= 300
		devs := make([]string, n)
		for i := range devs {
			devs[i] = fmt.Sprint(i)
		}
		waves, err := Waves(devs, stages)
		if err != nil {
			t.Fatalf("%q accepted, then: %v", s, err)
		}
		var all []string
		for _, w := range waves {
			if len(w) == 0 {
				t.Fatalf("%q: an empty wave", s)
			}
			all = append(all, w...)
		}
		if !slices.Equal(all, devs) {
			t.Fatalf("%q over %d devices: waves %v", s, n, waves)
		}
	})
}
