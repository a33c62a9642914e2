package packaging

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// noSessions is what every entry point to session continuity answers in
// a build without SQLite.
const noSessions = "session continuity is not compiled into this build (built with -tags nosqlite); use the standard build, which has it"

// smallTags reads the small build's tags from build.sh, so that this test
// checks the build the release makes.
func smallTags(t *testing.T) string {
	t.Helper()
	sh, err := os.ReadFile("../build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^SMALL_TAGS=\$\{SMALL_TAGS:-([a-z0-9_,]+)\}$`).FindSubmatch(sh)
	if m == nil {
		t.Fatal("build.sh has no SMALL_TAGS=${SMALL_TAGS:-...} line")
	}
	return string(m[1])
}

// TestSmallBuildDeps: the small build links neither SQLite (the store, the
// fts memory engine, session continuity) nor Redis nor the MCP SDK nor
// net/http's HTTP/2.
func TestSmallBuildDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", smallTags(t), "../cmd/openstarry").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 || !strings.Contains(string(out), "go.etcd.io/bbolt\n") {
		t.Fatalf("go list printed no dependency list:\n%s", out)
	}
	for _, p := range deps {
		for _, banned := range []string{"modernc.org/sqlite", "modernc.org/libc", "github.com/openstarry/openstarry-edge/core/session",
			"github.com/openstarry/openstarry-edge/storage/memory/fts", "github.com/openstarry/openstarry-edge/storage/redis", "github.com/redis/go-redis", "github.com/modelcontextprotocol/go-sdk",
			// net/http's HTTP/2 (its header compression is the one
			// package of it go list shows).
			"vendor/golang.org/x/net/http2"} {
			if p == banned || strings.HasPrefix(p, banned+"/") {
				t.Errorf("the small build (-tags %s) links %s", smallTags(t), p)
			}
		}
	}
}

// buildSmall builds the small build for this machine.
func buildSmall(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "openstarry-small")
	cmd := exec.Command("go", "build", "-tags", smallTags(t), "-o", bin, "../cmd/openstarry")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags %s: %v\n%s", smallTags(t), err, out)
	}
	return bin
}

// TestSmallBuildNoSessions: in the small build, version says what is left
// out, and every entry point to session continuity and the fts memory
// engine fails naming the build: the project, session and approval
// commands, the daemon's session API (which the web UI's project pages
// show), and a template whose memory is fts://. The daemon still boots,
// with its boot journal.
func TestSmallBuildNoSessions(t *testing.T) {
	bin := buildSmall(t)
	out, err := run(t, bin, "version")
	for _, want := range []string{"stores: bbolt\n", "left out: file (nofile) redis (noredis) rediss (noredis) sqlite (nosqlite)\n",
		"memory engines: qdrant qdrants; left out: fts (nosqlite)\n", "session continuity: not compiled in (nosqlite)\n",
		"mcp tools: not compiled in (no_mcp)\n", "enrolment hub: not compiled in (nohub)\n", "http: HTTP/1.1 only (nethttpomithttp2)\n", "brains: echo openai\n"} {
		if err != nil || !strings.Contains(out, want) {
			t.Errorf("version: %v, want %q in:\n%s", err, want, out)
		}
	}

	hub := exec.Command(bin, "hub", "token", "--state", t.TempDir())
	if out, err := hub.CombinedOutput(); err == nil || string(out) != "openstarry: the enrolment hub is not compiled into this build (built with -tags nohub); use the standard build, which has it\n" {
		t.Errorf("openstarry hub token: %v\n%s", err, out)
	}

	data := t.TempDir()
	for _, args := range [][]string{
		{"project", "list"},
		{"project", "create", "plan.json"},
		{"session", "list", "--json"},
		{"session", "resume", "s-1"},
		{"approval", "list"},
		{"approval", "approve", "a-1", "--by", "ops"},
	} {
		cmd := exec.Command(bin, append(args, "--data", data)...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || string(out) != "openstarry: "+noSessions+"\n" {
			t.Errorf("openstarry %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	// A template with the fts memory engine.
	tmpl := filepath.Join(t.TempDir(), "notes.json")
	os.WriteFile(tmpl, []byte(`{"name": "notes", "version": "1.0.0", "role": "worker", "brain": {"provider": "echo"},
  "system_prompt": "Notes.", "memory": "fts://", "tools": ["memory_search"], "context_budget": {"max_messages": 20}}`), 0o600)
	out, err = run(t, bin, "run", "--agent", "n", "--template", tmpl, "--data", t.TempDir(), "--listen", "", "--no-mqtt")
	if err == nil || !strings.Contains(out, `memory url "fts://": the fts memory engine is not compiled into this build (built with -tags nosqlite; built in: qdrant://, qdrants://)`) {
		t.Errorf("a template with fts:// memory in the small build: %v\n%s", err, out)
	}

	// The daemon boots; its session API answers 501 naming the build.
	cfg := filepath.Join(t.TempDir(), "openstarry.yaml")
	os.WriteFile(cfg, []byte("http:\n  listen: 127.0.0.1:0\nmqtt:\n  broker_listen: 127.0.0.1:0\n"), 0o600)
	d := start(t, bin, "start", "--config", cfg, "--data", data, "--log-format", "json")
	base := d.waitFor(t, regexp.MustCompile(`daemon listening on (http://[0-9.:]+)`), 2*time.Minute)
	d.waitFor(t, regexp.MustCompile(`phase 4/4`), 2*time.Minute)
	if logs := d.logs(); !strings.Contains(logs, `"previous run: none"`) || !strings.Contains(logs, `"message":"`+noSessions+`"`) {
		t.Errorf("the small daemon's boot does not log its journal and the missing sessions:\n%s", logs)
	}
	for _, r := range []struct{ method, path string }{
		{"GET", "/projects"},
		{"POST", "/projects"},
		{"GET", "/projects/p-1/sessions"},
		{"POST", "/projects/p-1/sessions/s-1/resume"},
		{"GET", "/approvals"},
		{"POST", "/approvals/a-1"},
	} {
		req, _ := http.NewRequest(r.method, base+r.path, strings.NewReader(`{}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error, Code string }
		if resp.StatusCode != http.StatusNotImplemented || json.Unmarshal(body, &e) != nil || e.Error != noSessions || e.Code != "not_compiled_in" {
			t.Errorf("%s %s: %s %s", r.method, r.path, resp.Status, body)
		}
	}
	// What is compiled in still answers.
	if resp, err := http.Get(base + "/status"); err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET /status: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
}
