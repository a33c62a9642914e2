package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/crashseed"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

var hydratedRe = regexp.MustCompile(`hydrated at tick (\d+)`)

// TestCrashRecovery runs the real binary, feeds it tasks whose tool is not
// idempotent, SIGKILLs it at random instants and restarts it, then checks
// that no acknowledged task was lost, no side effect happened twice, and
// the tick never went backwards.
func TestCrashRecovery(t *testing.T) {
	for _, store := range crashStores(t) {
		t.Run(store.name, func(t *testing.T) { crashRun(t, store.url) })
	}
}

type crashStore struct{ name, url string }

// crashStores lists the backends the crash test runs against, by URL.
func crashStores(t *testing.T) []crashStore {
	return []crashStore{
		{"bbolt", "bbolt://"},
		{"sqlite", "sqlite://%s/state.db"},
		{"file", "file://%s/snapshots"},
	}
}

func crashRun(t *testing.T, storeURL string) {
	const (
		agentID = "crash"
		tasks   = 200
		kills   = 24
	)
	data := t.TempDir()
	if storeURL != "bbolt://" {
		storeURL = fmt.Sprintf(storeURL, data)
	}
	args := []string{"run", "--agent", agentID, "--data", data, "--store", storeURL, "--listen", "127.0.0.1:0", "--no-mqtt"}
	t.Logf("%d tasks, %d kills", tasks, kills)
	rng := rand.New(rand.NewPCG(crashseed.Seed(t), 7))

	var (
		accepted = map[string]bool{}
		maxTick  uint64 // highest tick_index seen durable (a finished result)
		restarts int
	)
	c := startChild(t, true, args...)
	base := c.url()
	next := 0
	killAt := time.Now().Add(time.Duration(5+rng.IntN(60)) * time.Millisecond)
	for next < tasks || restarts < kills {
		if time.Now().After(killAt) && restarts < kills {
			// Observe what is durable, then kill at a random instant.
			if next > 0 {
				id := fmt.Sprintf("task-%03d", rng.IntN(next))
				if code, st, err := getTask(base, agentID, id); err == nil && code == 200 && st.TickIndex > maxTick {
					maxTick = st.TickIndex
				}
			}
			c.kill()
			restarts++
			c = startChild(t, true, args...)
			base = c.url()
			m := hydratedRe.FindStringSubmatch(c.logs())
			if m == nil {
				t.Fatalf("restart %d: no hydration line\n%s", restarts, c.logs())
			}
			tick, _ := strconv.ParseUint(m[1], 10, 64)
			if tick < maxTick {
				t.Fatalf("restart %d: hydrated at tick %d, but tick %d was already durable", restarts, tick, maxTick)
			}
			maxTick = tick
			killAt = time.Now().Add(time.Duration(rng.IntN(40)) * time.Millisecond)
			continue
		}
		if next >= tasks {
			time.Sleep(time.Until(killAt)) // every task sent: on to the next kill
			continue
		}
		id := fmt.Sprintf("task-%03d", next)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		code, body, err := postTask(ctx, base, agentID, appendTask(id, "tasks.log"))
		cancel()
		switch {
		case err != nil:
			// The child died mid-request: send the same task again.
			continue
		case code == 202 || code == 200:
			accepted[id] = true
			next++
		default:
			t.Fatalf("task %s: %d %s", id, code, body)
		}
	}

	// Let the last process finish everything.
	final := map[string]taskState{}
	deadline := time.Now().Add(60 * time.Second)
	for id := range accepted {
		var st taskState
		err := wait.Poll(time.Until(deadline), func() error {
			var code int
			var err error
			code, st, err = getTask(base, agentID, id)
			switch {
			case err != nil:
				t.Fatalf("task %s: %v", id, err)
			case code != 200:
				t.Fatalf("accepted task %s is lost: %d", id, code)
			case st.Status == "queued" || st.Status == "running":
				return errors.New(st.Status)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("task %s still %s\n%s", id, st.Status, c.logs())
		}
		final[id] = st
	}

	ends := map[string]taskEnd{}
	for id, st := range final {
		ends[id] = taskEnd{st.Status, st.Error}
	}
	done, unknown := checkSideEffects(t, filepath.Join(data, "agents", agentID, "artifacts", "tasks.log"), ends)
	if len(final) != tasks {
		t.Errorf("%d tasks accepted, want %d", len(final), tasks)
	}
	t.Logf("%d tasks: %d done, %d unknown_outcome, %d restarts", len(final), done, unknown, restarts)

	// A clean stop leaves the snapshot STOPPED and loadable by the CLI.
	if err := c.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if code, err := c.wait(20 * time.Second); err != nil || code != 0 {
		t.Fatalf("SIGINT exit = %d, %v\n%s", code, err, c.logs())
	}
}

// taskEnd is how a task of a crash test ended.
type taskEnd struct{ status, err string }

// checkSideEffects holds the crash tests' promise against the file their
// tasks append to (one "line ID" a task): a done task's line is there
// once, an unknown_outcome task's at most once, no line twice, and every
// task ended done or unknown_outcome.
func checkSideEffects(t *testing.T, file string, ends map[string]taskEnd) (done, unknown int) {
	t.Helper()
	lines := countLines(t, file)
	for id, e := range ends {
		n := lines["line "+id]
		switch e.status {
		case "done":
			done++
			if n != 1 {
				t.Errorf("task %s is done but its line is in the file %d times", id, n)
			}
		case "unknown_outcome":
			unknown++
			if n > 1 {
				t.Errorf("task %s ended unknown_outcome, and its line is in the file %d times", id, n)
			}
		default:
			t.Errorf("task %s ended %s (%s)", id, e.status, e.err)
		}
	}
	for line, n := range lines {
		if n > 1 {
			t.Errorf("%q appended %d times", line, n)
		}
	}
	return done, unknown
}
