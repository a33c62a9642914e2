package bbolt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/internal/powercut"
)

// helperEnv makes the test binary a process that opens a store and saves
// ("save DIR ID FROM TO": ticks FROM to TO, then closes) or loads ("load
// DIR ID": prints the tick). The stores of TestOpenSyncsAKilledCommit run
// in such processes: bbolt maps its file, and a page fault on the
// simulator's mount must not wait for a FUSE server stopped with the rest
// of its process by the garbage collector.
const helperEnv = "OPENSTARRY_TEST_BBOLT_HELPER"

func TestMain(m *testing.M) {
	if h := os.Getenv(helperEnv); h != "" {
		if err := helper(strings.Fields(h)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helper(args []string) error {
	if len(args) < 3 {
		return fmt.Errorf("helper: %q", args)
	}
	s, err := Open(args[1], Options{})
	if err != nil {
		return err
	}
	defer s.Close()
	switch args[0] {
	case "save":
		from, _ := strconv.ParseUint(args[3], 10, 64)
		to, _ := strconv.ParseUint(args[4], 10, 64)
		for tick := from; tick <= to; tick++ {
			snap := &agent.Snapshot{AgentID: args[2], TickIndex: tick, Status: agent.StatusWaitingForEvent}
			if err := s.Save(context.Background(), snap); err != nil {
				return err
			}
		}
		return s.Close() // folds the journal into state.db
	case "load":
		snap, err := s.Load(context.Background(), args[2])
		if err != nil {
			return err
		}
		if snap == nil {
			return fmt.Errorf("the agent loads blank")
		}
		fmt.Println(snap.TickIndex)
		return nil
	}
	return fmt.Errorf("helper: %q", args)
}

// TestOpenSyncsAKilledCommit: a process killed between writing a commit
// and syncing it leaves the commit in the page cache, not on the disk. The
// next process to open the store reads it; if it built on it (numbered its
// journal records after it) and a power cut then took it back, every Save
// since would be lost. Open makes what it reads durable first: after a
// power cut the store holds at least what an open before the cut read.
//
// The killed process is played by the files: state.db and the journal are
// written back as they were after three Saves, synced, then state.db as it
// was after six, not synced.
func TestOpenSyncsAKilledCommit(t *testing.T) {
	if err := powercut.Available(); err != nil {
		t.Skip(err)
	}
	pc := powercut.New(t, 7)
	dir := filepath.Join(pc.Dir(), "agents")
	const id = "a1"
	db := filepath.Join(dir, id, FileName)
	jr := filepath.Join(dir, id, JournalName)

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(self, "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join(args, " "))
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	saves := func(from, to int) { run("save", dir, id, strconv.Itoa(from), strconv.Itoa(to)) }
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tick := func() uint64 {
		n, err := strconv.ParseUint(run("load", dir, id), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}

	saves(1, 3)
	db3, jr3 := read(db), read(jr)
	saves(4, 6)
	db6 := read(db)
	powercut.WriteFile(t, db, db3, true)
	powercut.WriteFile(t, jr, jr3, true)
	powercut.WriteFile(t, db, db6, false) // the killed process's commit, not synced

	seen := tick()
	if seen != 6 {
		t.Fatalf("the open read tick %d, want the unsynced commit's 6", seen)
	}
	if _, err := pc.Cut(powercut.Drop); err != nil {
		t.Fatal(err)
	}
	if after := tick(); after < seen {
		t.Fatalf("after a power cut the store is at tick %d; an open before it had read tick %d", after, seen)
	}
}
