package storagetest

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/internal/crashseed"
)

// CrashHarness adapts one backend to RunCrash.
type CrashHarness struct {
	// Open opens the backend rooted at dir: in the child process, and in
	// the test after every kill. Calling it again with the same dir must see
	// what was saved before.
	Open func(t *testing.T, dir string) plugin.Storage

	// Snapshot returns the snapshot of the crash test's agent at tick (from
	// 1): the same tick always gives the same snapshot, and consecutive
	// ticks are what the kernel would save. Nil means CrashSnapshot.
	Snapshot func(tick uint64) *agent.Snapshot

	// Equal fails the test unless got, loaded after a kill, is want, the
	// snapshot of its tick. Nil means MustEqual.
	Equal func(t *testing.T, got, want *agent.Snapshot)
}

// CrashSnapshot is the snapshot of tick of the default crash test agent,
// "crasher": Sample with a history of 40 messages that slides by one a tick.
func CrashSnapshot(tick uint64) *agent.Snapshot {
	s := Sample("crasher", tick)
	h := make([]agent.Message, 0, 40)
	for i := tick; i < tick+40; i++ {
		h = append(h, agent.Message{Role: "user", Content: fmt.Sprintf("message %d %s", i, strings.Repeat("·", int(i%50)))})
	}
	s.Memory.ShortTermHistory = h
	s.HistorySeq = tick
	return s
}

// crashEnv names the store directory of the child process of RunCrash.
const crashEnv = "OPENSTARRY_STORAGETEST_CRASH_DIR"

// crashRounds is how many times RunCrash kills a child.
const crashRounds = 12

// crashAckTimeout is how long a round waits for the acknowledgements it
// kills after: the child's start (a race-enabled test binary) and up to 64
// fsynced saves, on a loaded machine with a busy disk. It ends as soon as
// they arrive; only a child that stopped saving reaches it.
const crashAckTimeout = 2 * time.Minute

// crashChildLife bounds a child whose parent neither kills it nor dies.
const crashChildLife = 2 * crashAckTimeout

// RunCrash is the crash test of a backend. It runs the test binary again as
// a child process that runs the calling test, which, seeing itself a child,
// opens the store and saves tick after tick of one agent, printing "acked N"
// once Save of tick N returned. The test kills the child with SIGKILL at a
// random moment (after 5 to 64 acknowledgements, then 0 to 3 ms; the seed
// of these choices is printed, and -crash.seed replays it), with no
// deferred code and no Close; then the store must open, and load the last
// acknowledged tick or the one in flight, exactly as it was saved. It does
// so 12 times on the same store, each child going on from the tick it
// loads. With -short the test is skipped.
//
// The calling test must do nothing else before RunCrash that the child
// should not do.
func RunCrash(t *testing.T, h CrashHarness) {
	t.Helper()
	if h.Open == nil {
		t.Fatal("storagetest: CrashHarness.Open is nil")
	}
	snapshot := h.Snapshot
	if snapshot == nil {
		snapshot = CrashSnapshot
	}
	equal := h.Equal
	if equal == nil {
		equal = func(t *testing.T, got, want *agent.Snapshot) { t.Helper(); MustEqual(t, got, want) }
	}
	id := snapshot(1).AgentID
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(t, h.Open(t, dir), id, snapshot)
		return
	}
	if testing.Short() {
		t.Skip("kills child processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(crashseed.Seed(t), 7))
	for round := 0; round < crashRounds; round++ {
		acked := crashRound(t, round, dir, rng)

		s := h.Open(t, dir)
		got, err := s.Load(ctx, id)
		if cerr := s.Close(); cerr != nil {
			t.Fatalf("round %d: Close after the crash: %v", round, cerr)
		}
		if err != nil || got == nil {
			t.Fatalf("round %d: Load after the crash: %v, %v", round, got, err)
		}
		if got.TickIndex != acked && got.TickIndex != acked+1 {
			t.Fatalf("round %d: loaded tick %d, the last acknowledged was %d", round, got.TickIndex, acked)
		}
		equal(t, got, snapshot(got.TickIndex))
		t.Logf("round %d: killed after tick %d was acknowledged; loaded tick %d", round, acked, got.TickIndex)
	}
}

// crashChild is the child of RunCrash: it saves tick after tick until the
// parent kills it. Should the parent die first, the child's next
// acknowledgement meets a closed pipe (SIGPIPE ends it), and after
// crashChildLife it stops anyway.
func crashChild(t *testing.T, s plugin.Storage, id string, snapshot func(uint64) *agent.Snapshot) {
	last, err := s.Load(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	tick := uint64(0)
	if last != nil {
		tick = last.TickIndex
	}
	for deadline := time.Now().Add(crashChildLife); time.Now().Before(deadline); {
		tick++
		if err := s.Save(ctx, snapshot(tick)); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", tick)
	}
}

// crashRound starts a child on dir, kills it at a random moment, and
// returns the last tick it acknowledged.
func crashRound(t *testing.T, round int, dir string, rng *rand.Rand) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var other LogBuffer // what the child said besides its acknowledgements
	cmd.Stderr = &other
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acks := make(chan uint64, 1024)
	go func() {
		defer close(acks)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
				n, _ := strconv.ParseUint(v, 10, 64)
				acks <- n
			} else {
				fmt.Fprintln(&other, sc.Text())
			}
		}
	}()
	var acked uint64
	// kill kills the child (SIGKILL: no deferred code, no Close) and takes
	// the acknowledgements still in the pipe, made before the kill.
	kill := func() {
		cmd.Process.Kill()
		for v := range acks {
			acked = v
		}
		cmd.Wait()
	}

	target := 5 + rng.IntN(60)
	started := time.Now()
	timeout := time.After(crashAckTimeout)
	for seen := 0; seen < target; {
		select {
		case v, ok := <-acks:
			if !ok {
				cmd.Wait()
				t.Fatalf("round %d: the child exited after %d acknowledgements:\n%s", round, seen, other.String())
			}
			acked = v
			seen++
		case <-timeout:
			kill()
			t.Fatalf("round %d: the child acknowledged %d ticks in %s:\n%s", round, seen, crashAckTimeout, other.String())
		}
	}
	if d := time.Since(started); d > 10*time.Second {
		t.Logf("round %d: %d acknowledgements took %s (a loaded machine)", round, target, d.Round(time.Millisecond))
	}
	time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	kill()
	return acked
}
