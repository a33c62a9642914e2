package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// docsFileTimeout bounds the sh blocks of one file, after the daemon is up.
const docsFileTimeout = 90 * time.Second

// TestDocs runs every ```sh block of README.md and docs/*.md against the
// real binary, so that the examples cannot drift from what it does.
//
// Each file gets a fresh scratch directory holding bin/openstarry, with bin
// on PATH, and a private network namespace (unshare --net, loopback up), so
// that the fixed ports 127.0.0.1:7777 and 127.0.0.1:1883 are its own. There
// the daemon is started as `make run` starts it (openstarry start --data
// ./data) and, once /healthz answers ok, the file's sh blocks run in order
// in one bash -euo pipefail. A failing block is reported with its file:line
// and its output; a ```text expect block must be found in the output of the
// sh block above it. The conventions are described in docs/development.md.
func TestDocs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the examples run in a private network namespace (unshare --net), which needs root; CI runs as root")
	}
	for _, tool := range []string{"bash", "unshare", "ip", "curl", "timeout", "mosquitto_pub", "mosquitto_sub"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("TestDocs needs %s (.ci/run installs it): %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var run, norun, expect int
	for _, path := range files {
		rel, _ := filepath.Rel(root, path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseDocBlocks(rel, string(data))
		if err != nil {
			t.Error(err)
			continue
		}
		var sh []docBlock
		checks := map[int][]docBlock{} // index in sh → the text expect blocks that follow it
		var prev *docBlock             // the last block that is not a text expect
		bad := false
		for i := range blocks {
			b := blocks[i]
			k, err := b.kind()
			if err != nil {
				t.Error(err)
				bad = true
			}
			switch k {
			case docRun:
				sh = append(sh, b)
			case docNoRun:
				norun++
				t.Logf("%s: sh norun (shown, not run)", b.where())
			case docExpect:
				if prev == nil || prev.info != "sh" {
					t.Errorf("%s: a text expect block must follow an sh block", b.where())
					bad = true
					break
				}
				checks[len(sh)-1] = append(checks[len(sh)-1], b)
				expect++
			}
			if k != docExpect {
				prev = &blocks[i]
			}
		}
		run += len(sh)
		if bad || len(sh) == 0 {
			continue
		}
		t.Run(strings.TrimSuffix(rel, ".md"), func(t *testing.T) { runDocFile(t, sh, checks) })
	}
	t.Logf("%d files: %d sh blocks run, %d text expect blocks checked, %d sh norun blocks shown only", len(files), run, expect, norun)
}

// runDocFile runs the sh blocks of one file in a fresh directory and network
// namespace, against a daemon started as `make run` starts it.
func runDocFile(t *testing.T, sh []docBlock, checks map[int][]docBlock) {
	work := t.TempDir()
	meta := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "bin"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binPath, filepath.Join(work, "bin", "openstarry")); err != nil {
		t.Fatal(err)
	}

	// One bash for the whole file: each block is a brace group (run in the
	// same shell, so cd and variables carry over) whose output goes to its
	// own file; the index of the block about to run is written first.
	var script strings.Builder
	script.WriteString("cd " + strconv.Quote(work) + "\n")
	for i, b := range sh {
		fmt.Fprintf(&script, "echo %d >%s\n{\n%s} >%s 2>&1 </dev/null\n", i,
			strconv.Quote(filepath.Join(meta, "current")), b.body,
			strconv.Quote(filepath.Join(meta, "out."+strconv.Itoa(i))))
	}
	script.WriteString("echo done >" + strconv.Quote(filepath.Join(meta, "current")) + "\n")
	blocksPath := filepath.Join(meta, "blocks.sh")
	if err := os.WriteFile(blocksPath, []byte(script.String()), 0o600); err != nil {
		t.Fatal(err)
	}

	daemonLog := filepath.Join(meta, "daemon.log")
	driver := fmt.Sprintf(`set -u
ip link set lo up
cd %[1]s
openstarry start --data ./data >%[2]s 2>&1 </dev/null &
daemon=$!
ready=
for _ in $(seq 600); do
  if curl -sf -o /dev/null http://127.0.0.1:7777/healthz; then ready=1; break; fi
  kill -0 $daemon 2>/dev/null || break
  sleep 0.05
done
if [ -z "$ready" ]; then echo "the daemon did not become ready within 30s" >&2; kill -9 $daemon; exit 90; fi
timeout -k 5 %[3]d bash -euo pipefail %[4]s
rc=$?
kill -TERM $daemon 2>/dev/null
for _ in $(seq 300); do kill -0 $daemon 2>/dev/null || break; sleep 0.05; done
exit $rc
`, strconv.Quote(work), strconv.Quote(daemonLog), int(docsFileTimeout/time.Second), strconv.Quote(blocksPath))

	ctx, cancel := context.WithTimeout(context.Background(), docsFileTimeout+60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "unshare", "--net", "--", "bash", "-c", driver)
	cmd.Dir = work
	cmd.Env = docEnv(work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Whatever a block left in the background goes with the process group.
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	t.Logf("%d sh blocks in %s", len(sh), time.Since(start).Round(time.Millisecond))

	cur, _ := os.ReadFile(filepath.Join(meta, "current"))
	at := strings.TrimSpace(string(cur))
	if err != nil || at != "done" {
		logs, _ := os.ReadFile(daemonLog)
		if n, convErr := strconv.Atoi(at); convErr == nil && n < len(sh) {
			out, _ := os.ReadFile(filepath.Join(meta, "out."+at))
			why := fmt.Sprint(err)
			if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 124 {
				why = fmt.Sprintf("timed out after %s", docsFileTimeout)
			}
			t.Fatalf("%s: the block failed (%s):\n%s\n--- its output:\n%s\n--- stderr:\n%s\n--- the daemon's log:\n%s",
				sh[n].where(), why, sh[n].body, out, stderr.String(), logs)
		}
		t.Fatalf("%s: the examples did not run (%v):\n%s\n--- the daemon's log:\n%s", sh[0].file, err, stderr.String(), logs)
	}
	for i, bs := range checks {
		out, _ := os.ReadFile(filepath.Join(meta, "out."+strconv.Itoa(i)))
		for _, b := range bs {
			if line, ok := matchExpected(b.body, string(out)); !ok {
				t.Errorf("%s: %q is not in the output of the block at %s:\n%s", b.where(), line, sh[i].where(), out)
			}
		}
	}
}

// docEnv is the examples' environment: the test's, with bin first on PATH,
// HOME in the scratch directory and no OPENSTARRY_* setting, as a newcomer
// would have it. Proxy settings are dropped too: nothing outside the network
// namespace can be reached, and curl would send 127.0.0.1 to the proxy.
func docEnv(work string) []string {
	env := []string{"PATH=" + filepath.Join(work, "bin") + string(os.PathListSeparator) + os.Getenv("PATH"), "HOME=" + work}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "PATH" || k == "HOME" || strings.HasPrefix(k, "OPENSTARRY_") || strings.HasSuffix(strings.ToLower(k), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
