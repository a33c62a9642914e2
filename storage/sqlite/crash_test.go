package sqlite

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// crashSnapshot is the snapshot of tick n of the crash test's agent: the
// same n always gives the same snapshot, and the history slides.
func crashSnapshot(n uint64) *agent.Snapshot {
	s := storagetest.Sample("crasher", n)
	h := make([]agent.Message, 0, 40)
	for i := n; i < n+40; i++ {
		h = append(h, agent.Message{Role: "user", Content: fmt.Sprintf("message %d %s", i, strings.Repeat("·", int(i%50)))})
	}
	s.Memory.ShortTermHistory = h
	s.HistorySeq = n
	return s
}

// TestCrashChild is the child of TestCrash: it saves tick after tick and
// prints "acked N" once Save of tick N returned.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("OPENSTARRY_CRASH_CHILD")
	if dir == "" {
		t.Skip("runs as the child of TestCrash")
	}
	s, err := Open(ctx, dbPath(dir), Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.Load(ctx, "crasher")
	if err != nil {
		t.Fatal(err)
	}
	n := uint64(0)
	if last != nil {
		n = last.TickIndex
	}
	for {
		n++
		if err := s.Save(ctx, crashSnapshot(n)); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("acked %d\n", n)
	}
}

// TestCrash kills a saving child with SIGKILL at random points: every time,
// the store must load the last acknowledged tick or the one in flight,
// exactly as it was saved.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills child processes")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	for round := 0; round < 12; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
		cmd.Env = append(os.Environ(), "OPENSTARRY_CRASH_CHILD="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		acked := uint64(0)
		target := 5 + rng.IntN(60)
		for seen := 0; seen < target && sc.Scan(); {
			if v, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
				acked, _ = strconv.ParseUint(v, 10, 64)
				seen++
			}
		}
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		cmd.Process.Kill() // SIGKILL: no deferred code, no Close
		// Acknowledgements still in the pipe were made before the kill.
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
				acked, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		cmd.Wait()
		if acked == 0 {
			t.Fatalf("round %d: the child acknowledged nothing", round)
		}

		s, err := Open(ctx, dbPath(dir), Options{Logger: zerolog.New(zerolog.NewTestWriter(t))})
		if err != nil {
			t.Fatalf("round %d: Open after the crash: %v", round, err)
		}
		got, err := s.Load(ctx, "crasher")
		s.Close()
		if err != nil || got == nil {
			t.Fatalf("round %d: Load after the crash: %v, %v", round, got, err)
		}
		if got.TickIndex != acked && got.TickIndex != acked+1 {
			t.Fatalf("round %d: loaded tick %d, the last acknowledged was %d", round, got.TickIndex, acked)
		}
		mustEqual(t, got, crashSnapshot(got.TickIndex))
		t.Logf("round %d: killed after tick %d was acknowledged; loaded tick %d", round, acked, got.TickIndex)
	}
}
