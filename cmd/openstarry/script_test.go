package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// TestScripts runs the command-line scripts in testdata/script, each in a
// fresh $WORK with the built binary on PATH as openstarry and $TEMPLATES
// naming the shipped templates (configs/templates). Besides testscript's
// commands they have:
//
//	exits N CMD [ARGS...]   exec CMD and check that it exits with status N
//	replace FILE OLD NEW    replace the first OLD in FILE with NEW
//	samples DATA ID...      save a sample snapshot of each agent ID in a
//	                        bbolt store in DATA, and its encoding (what
//	                        snapshot show prints) in want/ID.json
//
// go test -run TestScripts -testwork keeps the $WORK directories.
func TestScripts(t *testing.T) {
	templates, err := filepath.Abs(filepath.Join("..", "..", "configs", "templates"))
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", filepath.Dir(binPath)+string(os.PathListSeparator)+env.Getenv("PATH"))
			env.Setenv("TEMPLATES", templates)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"exits":   cmdExits,
			"replace": cmdReplace,
			"samples": cmdSamples,
		},
	})
}

func cmdExits(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: exits N command [args...]")
	}
	want, err := strconv.Atoi(args[0])
	ts.Check(err)
	got := 0
	var ee *exec.ExitError
	if err := ts.Exec(args[1], args[2:]...); errors.As(err, &ee) {
		got = ee.ExitCode()
	} else if err != nil {
		ts.Fatalf("%s: %v", args[1], err)
	}
	if got != want {
		ts.Fatalf("%s exited with status %d, want %d", args[1], got, want)
	}
}

func cmdReplace(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: replace FILE OLD NEW")
	}
	data, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	if !strings.Contains(string(data), args[1]) {
		ts.Fatalf("%s does not contain %q", args[0], args[1])
	}
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), []byte(strings.Replace(string(data), args[1], args[2], 1)), 0o600))
}

func cmdSamples(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: samples DATA ID...")
	}
	st, err := bbolt.Open(filepath.Join(ts.MkAbs(args[0]), "agents"), bbolt.Options{})
	ts.Check(err)
	defer st.Close()
	ts.Check(os.MkdirAll(ts.MkAbs("want"), 0o700))
	for _, id := range args[1:] {
		s := storagetest.Sample(id, 5)
		ts.Check(st.Save(context.Background(), s))
		enc, err := agent.Encode(s)
		ts.Check(err)
		ts.Check(os.WriteFile(ts.MkAbs(filepath.Join("want", id+".json")), append(enc, '\n'), 0o600))
	}
}
