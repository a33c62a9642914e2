package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

func TestBoot(t *testing.T) {
	cfg := testConfig(t)
	putSnapshot(cfg.Store[len("memtest://"):], &agent.Snapshot{AgentID: "master", TickIndex: 41, Status: agent.StatusThinking})
	putSnapshot(cfg.Store[len("memtest://"):], &agent.Snapshot{AgentID: "old", TickIndex: 3, Status: agent.StatusStopped})
	e := startEnv(t, cfg, testResolver(nil), nil)
	st, err := e.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Phases) != 4 || st.Phases[3].N != 4 {
		t.Fatalf("phases %+v", st.Phases)
	}
	if len(st.Agents) != 1 || st.Agents[0].ID != "master" || st.Agents[0].State != control.StateRunning || !st.Agents[0].Recovered {
		t.Fatalf("agents %+v", st.Agents)
	}
	if !st.Agents[0].Snapshot || st.Agents[0].Queue != 2 {
		t.Fatalf("snapshot figures not filled: %+v", st.Agents[0])
	}
	if len(st.Interrupted) != 1 || st.Interrupted[0].AgentID != "master" || st.Interrupted[0].Tick != 41 || st.Interrupted[0].Status != "THINKING" {
		t.Fatalf("interrupted %+v", st.Interrupted)
	}
	// The blueprint is frozen, read-only, and named after its template.
	path := filepath.Join(cfg.Data, "run", "blueprints", "master", "master.json")
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o400 {
		t.Fatalf("frozen blueprint: %v %v", err, fi)
	}
	spec := e.l.launches[0]
	joined := strings.Join(spec.Args, " ")
	for _, want := range []string{"core --agent master", "--template " + path, "--listen 127.0.0.1:0", "--store " + cfg.Store, "--log-format json"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args %q lack %q", joined, want)
		}
	}
	var haveAddr, haveToken bool
	for _, kv := range spec.Env {
		haveAddr = haveAddr || strings.HasPrefix(kv, control.EnvAddr+"=unix://")
		// The agent's own token, not the operator's (TestAgentTokens).
		tok, ok := strings.CutPrefix(kv, control.EnvToken+"=")
		haveToken = haveToken || ok && tok != "" && tok != e.d.ctl.token && tok == e.d.ctl.agentToken("master")
	}
	if !haveAddr || !haveToken {
		t.Fatalf("control API not in the environment: %v", spec.Env)
	}
}

// TestEnvScrubbed: the agents see no OPENSTARRY_* variable of the daemon's
// but those a template needs.
func TestEnvScrubbed(t *testing.T) {
	t.Setenv("OPENSTARRY_LISTEN", "0.0.0.0:1")
	t.Setenv("OPENSTARRY_KEY_FOR_LLM", "k")
	d := &Daemon{cfg: config.Default(), data: "/d"}
	d.specs = &specs{cfg: d.cfg, data: d.data, infra: &infraSet{}, ctl: &controlAPI{addr: "unix:///x", token: "tok"}}
	ls := d.specs.launchSpec("a", control.RoleWorker, agentSpec{Blueprint: "/b/w.json", KeepEnv: []string{"OPENSTARRY_KEY_FOR_LLM"}})
	env := strings.Join(ls.Env, "\n")
	if strings.Contains(env, "OPENSTARRY_LISTEN") || !strings.Contains(env, "OPENSTARRY_KEY_FOR_LLM=k") {
		t.Fatalf("env:\n%s", env)
	}
	d.cfg.Log.Level = "error"
	ls = d.specs.launchSpec("a", control.RoleWorker, agentSpec{Blueprint: "/b/w.json", Storage: "bbolt:///x"})
	if j := strings.Join(ls.Args, " "); !strings.Contains(j, "--log-level info") || strings.Contains(j, "--store") {
		t.Fatalf("args %s", j)
	}
}

// TestAgentProcs: an agent gets GOMAXPROCS=1, and EnvProcs to say the
// daemon set it, unless the daemon's environment sets GOMAXPROCS: then it
// gets that, as it is.
func TestAgentProcs(t *testing.T) {
	d := &Daemon{cfg: config.Default(), data: "/d"}
	d.specs = &specs{cfg: d.cfg, data: d.data, infra: &infraSet{}, ctl: &controlAPI{addr: "unix:///x", token: "tok"}}
	for _, tc := range []struct {
		operator string
		want     []string
	}{
		{"", []string{"GOMAXPROCS=1", control.EnvProcs + "=1"}},
		{"3", []string{"GOMAXPROCS=3"}},
	} {
		t.Setenv("GOMAXPROCS", tc.operator)
		var got []string
		for _, kv := range d.specs.launchSpec("a", control.RoleWorker, agentSpec{Blueprint: "/b/w.json"}).Env {
			if k, _, _ := strings.Cut(kv, "="); k == "GOMAXPROCS" || k == control.EnvProcs {
				got = append(got, kv)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("daemon's GOMAXPROCS=%q: the agent's %q, want %q", tc.operator, got, tc.want)
		}
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	cfg := testConfig(t)
	startEnv(t, cfg, testResolver(nil), nil)
	err := Run(context.Background(), Options{Config: cfg, Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop()})
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second daemon: %v", err)
	}
}

func TestStoreCannotOpen(t *testing.T) {
	cfg := testConfig(t)
	cfg.Store = "memtest://fail"
	err := Run(context.Background(), Options{Config: cfg, Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "state store") {
		t.Fatalf("err = %v", err)
	}
	// The lock was released: a new daemon may start.
	cfg.Store = "memtest://ok"
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, Resolver: testResolver(nil), Launcher: newFakeLauncher("http://127.0.0.1:1"),
			Log: zerolog.Nop(), Booted: cancel})
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestLockedAgentInScan(t *testing.T) {
	cfg := testConfig(t)
	cfg.Store = "memtest://withlocked"
	e := startEnv(t, cfg, testResolver(nil), nil)
	st, _ := e.client.Status(context.Background())
	if len(st.Interrupted) != 1 || st.Interrupted[0].AgentID != "locked" || !strings.Contains(st.Interrupted[0].Error, "locked") {
		t.Fatalf("%+v", st.Interrupted)
	}
}

func TestDesignLayerFailure(t *testing.T) {
	cfg := testConfig(t)
	cfg.Master.Template = "nosuch"
	err := Run(context.Background(), Options{Config: cfg, Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop()})
	if err == nil || !strings.Contains(err.Error(), "design layer") || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("err = %v", err)
	}
}

func TestBackoff(t *testing.T) {
	cfg := config.Default()
	cfg.Supervise.BackoffInitial = 100 * time.Millisecond
	cfg.Supervise.BackoffMax = time.Second
	for _, tc := range []struct {
		n       int
		r       float64
		want    time.Duration
		comment string
	}{
		{1, 0.5, 100 * time.Millisecond, "first"},
		{2, 0.5, 200 * time.Millisecond, "doubles"},
		{4, 0.5, 800 * time.Millisecond, ""},
		{5, 0.5, time.Second, "capped"},
		{50, 0.5, time.Second, "no overflow"},
		{1, 0, 80 * time.Millisecond, "-20%"},
		{1, 0.999999, 120 * time.Millisecond, "+20%"},
	} {
		d := &Daemon{super: &supervisor{cfg: cfg, rand: func() float64 { return tc.r }}}
		if got := d.super.backoff(tc.n); got.Round(time.Millisecond) != tc.want {
			t.Errorf("backoff(%d, r=%v) = %v, want %v (%s)", tc.n, tc.r, got, tc.want, tc.comment)
		}
	}
}

// TestCrashloop: an agent that exits at once is restarted with backoff,
// then marked crashloop and left alone until a restart by hand.
func TestCrashloop(t *testing.T) {
	cfg := testConfig(t)
	e := startEnv(t, cfg, testResolver(nil), func(l *fakeLauncher) { l.set("master", behaveCrash) })
	info := e.waitState("master", control.StateCrashloop)
	if info.Restarts != cfg.Supervise.CrashloopRestarts || !strings.Contains(info.LastError, "boom") {
		t.Fatalf("%+v", info)
	}
	// No process runs: no pid (a dead one would mislead) and no address.
	if info.PID != 0 || info.Addr != "" {
		t.Fatalf("crashloop shows pid %d addr %q", info.PID, info.Addr)
	}
	n := len(e.l.eventsCopy())
	wait.Settle(t, 50*time.Millisecond, "a restart would have been launched by now (the backoff is at most 20 ms)")
	if len(e.l.eventsCopy()) != n {
		t.Fatal("an agent in crashloop was restarted")
	}
	sawCrashloop := false
	for len(e.states) > 0 {
		if (<-e.states).State == control.StateCrashloop {
			sawCrashloop = true
		}
	}
	if !sawCrashloop {
		t.Error("OnAgentState was not told of the crashloop")
	}
	// Fixed: a restart by hand brings it back.
	e.l.set("master", behaveReady)
	got, err := e.client.Restart(context.Background(), "master")
	if err != nil || got.State != control.StateRunning || got.Restarts != cfg.Supervise.CrashloopRestarts+1 {
		t.Fatalf("restart: %+v %v", got, err)
	}
	// A restart that fails reports the error.
	e.l.set("master", behaveCrash)
	if _, err := e.client.Restart(context.Background(), "master"); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("failing restart: %v", err)
	}
	e.waitState("master", control.StateCrashloop)
}

// TestCrashAfterRunning: a running agent that dies is restarted.
func TestCrashAfterRunning(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(nil), nil)
	m := e.d.super.member("master")
	e.l.mu.Lock()
	e.l.live[m.info().PID].exit(errors.New("signal: killed"), -1, "")
	e.l.mu.Unlock()
	wait.For(t, 10*time.Second, "restart", func() bool { i := m.info(); return i.State == control.StateRunning && i.Restarts == 1 })
	if !strings.Contains(m.info().LastError, "killed") {
		t.Fatalf("%+v", m.info())
	}
}

func TestReadyTimeoutAndKill(t *testing.T) {
	cfg := testConfig(t)
	cfg.Supervise.ReadyTimeout = 30 * time.Millisecond
	cfg.Supervise.CrashloopRestarts = 1
	e := startEnv(t, cfg, testResolver(nil), func(l *fakeLauncher) { l.set("master", behaveHang) })
	info := e.waitState("master", control.StateCrashloop)
	if !strings.Contains(info.LastError, "ready_timeout") {
		t.Fatalf("%+v", info)
	}
	if e.l.liveCount() != 0 {
		t.Fatal("a hung process was not killed")
	}
}

func TestStopAndRestart(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(nil), nil)
	info, err := e.client.Stop(context.Background(), "master")
	if err != nil || info.State != control.StateStopped || info.PID != 0 {
		t.Fatalf("stop: %+v %v", info, err)
	}
	if e.l.liveCount() != 0 {
		t.Fatal("process still alive")
	}
	info, err = e.client.Restart(context.Background(), "master")
	if err != nil || info.State != control.StateRunning || info.Restarts != 1 {
		t.Fatalf("restart: %+v %v", info, err)
	}
	if _, err := e.client.Stop(context.Background(), "nobody"); !isCode(err, control.CodeUnknownAgent) {
		t.Fatalf("unknown: %v", err)
	}
}

func TestControlToken(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(nil), nil)
	bad, err := control.New(e.client.Addr(), "wrong")
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Status(context.Background()); !isCode(err, control.CodeUnauthorized) {
		t.Fatalf("wrong token: %v", err)
	}
	fi, err := os.Stat(filepath.Join(e.cfg.Data, "run", control.TokenFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %v %v", fi, err)
	}
}

func isCode(err error, code string) bool {
	var ce *control.Error
	return errors.As(err, &ce) && ce.Code == code
}

// TestWorkers: spawn with a task, the result comes back to the master as a
// worker_result task; list; stop; refusals.
func TestWorkers(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(map[string]string{"master": masterWithManager}), nil)
	ctx := context.Background()
	raw, err := e.client.Manage(ctx, "master", control.AgentRequest{Action: control.ActionSpawn, Template: "worker", AgentID: "w1",
		Task: json.RawMessage(`{"task_id":"job-1","input":"hello"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var sr control.SpawnResult
	if err := json.Unmarshal(raw, &sr); err != nil {
		t.Fatal(err)
	}
	if sr.AgentID != "w1" || sr.State != control.StateRunning || sr.PID == 0 || sr.TaskID != "job-1" ||
		sr.ResultTaskID != "worker_result:w1:job-1" {
		t.Fatalf("%+v", sr)
	}
	wait.For(t, 10*time.Second, "the worker_result at the master", func() bool { _, ok := e.agents.task("master", sr.ResultTaskID); return ok })
	got, _ := e.agents.task("master", sr.ResultTaskID)
	var wr WorkerResult
	if err := json.Unmarshal(got.Input, &wr); err != nil {
		t.Fatal(err)
	}
	if got.Type != WorkerResultType || wr.Worker != "w1" || wr.TaskID != "job-1" || wr.Status != agent.ResultDone || string(wr.Output) != `"hello"` {
		t.Fatalf("worker result %+v %s", got, got.Input)
	}
	wait.For(t, 10*time.Second, "handoff forgotten", func() bool { return len(e.d.workers.reg.snapshot().Handoffs) == 0 })

	for _, tc := range []struct {
		name      string
		requester string
		req       control.AgentRequest
		code      string
	}{
		{"same id", "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "w1"}, control.CodeConflict},
		{"master id", "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "master"}, control.CodeConflict},
		{"not a worker template", "master", control.AgentRequest{Action: "spawn", Template: "master", AgentID: "x"}, control.CodeTemplate},
		{"not in workers", "master", control.AgentRequest{Action: "spawn", Template: "echo"}, control.CodeTemplate},
		{"no template", "master", control.AgentRequest{Action: "spawn", Template: "nosuch"}, control.CodeTemplate},
		{"bad id", "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "../x"}, control.CodeBadRequest},
		{"bad task", "master", control.AgentRequest{Action: "spawn", Template: "worker", Task: json.RawMessage(`[1]`)}, control.CodeBadRequest},
		{"unknown requester", "ghost", control.AgentRequest{Action: "spawn", Template: "worker"}, control.CodeBadRequest},
		{"stop the master", "master", control.AgentRequest{Action: "stop", AgentID: "master"}, control.CodeBadRequest},
		{"bad action", "master", control.AgentRequest{Action: "dance"}, control.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := e.client.Manage(ctx, tc.requester, tc.req); !isCode(err, tc.code) {
				t.Fatalf("err = %v, want code %s", err, tc.code)
			}
		})
	}

	raw, err = e.client.Manage(ctx, "master", control.AgentRequest{Action: control.ActionList})
	if err != nil {
		t.Fatal(err)
	}
	var list []control.AgentInfo
	_ = json.Unmarshal(raw, &list)
	if len(list) != 2 || list[1].ID != "w1" || list[1].Requester != "master" || list[1].Role != control.RoleWorker {
		t.Fatalf("list %+v", list)
	}
	if _, err := e.client.Manage(ctx, "master", control.AgentRequest{Action: control.ActionStop, AgentID: "w1"}); err != nil {
		t.Fatal(err)
	}
	if e.d.super.member("w1") != nil || len(e.d.workers.reg.snapshot().Workers) != 0 {
		t.Fatal("stopped worker still known")
	}
	// The id is free again; a generated id is template-based.
	raw, err = e.client.Manage(ctx, "master", control.AgentRequest{Action: control.ActionSpawn, Template: "worker"})
	if err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(raw, &sr)
	if !strings.HasPrefix(sr.AgentID, "worker-") {
		t.Fatalf("generated id %q", sr.AgentID)
	}
}

// TestWorkerFailureAndTaskID: a failed task comes back failed; a task
// without an id gets one.
func TestWorkerFailureAndTaskID(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(map[string]string{"master": masterWithManager}), nil)
	e.agents.mu.Lock()
	e.agents.fail["w2"] = true
	e.agents.mu.Unlock()
	raw, err := e.client.Manage(context.Background(), "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "w2",
		Task: json.RawMessage(`{"input":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	var sr control.SpawnResult
	_ = json.Unmarshal(raw, &sr)
	if !strings.HasPrefix(sr.TaskID, "t-") {
		t.Fatalf("%+v", sr)
	}
	wait.For(t, 10*time.Second, "failed result", func() bool { _, ok := e.agents.task("master", sr.ResultTaskID); return ok })
	got, _ := e.agents.task("master", sr.ResultTaskID)
	if !strings.Contains(string(got.Input), `"status":"failed"`) || !strings.Contains(string(got.Input), "it broke") {
		t.Fatalf("%s", got.Input)
	}
}

// TestWorkersRestored: the next daemon restores the workers and resumes
// the handoffs of the previous one.
func TestWorkersRestored(t *testing.T) {
	cfg := testConfig(t)
	res := testResolver(map[string]string{"master": masterWithManager})
	e := startEnv(t, cfg, res, func(l *fakeLauncher) { l.set("w3", behaveHang) })
	cfg.Supervise.ReadyTimeout = 10 * time.Second
	go func() {
		_, _ = e.client.Manage(context.Background(), "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: "w3",
			Task: json.RawMessage(`{"task_id":"r1","input":"again"}`)})
	}()
	wait.For(t, 10*time.Second, "registered", func() bool { return len(e.d.workers.reg.snapshot().Handoffs) == 1 })
	e.stop()
	if e.l.liveCount() != 0 {
		t.Fatal("processes left after shutdown")
	}
	data := readFile(t, cfg.Data, "run", RegistryFile)
	if !strings.Contains(data, `"w3"`) || !strings.Contains(data, `"r1"`) {
		t.Fatalf("registry:\n%s", data)
	}
	e2 := startEnv(t, cfg, res, nil)
	e2.waitState("w3", control.StateRunning)
	wait.For(t, 10*time.Second, "resumed result", func() bool { _, ok := e2.agents.task("master", "worker_result:w3:r1"); return ok })
	wait.For(t, 10*time.Second, "handoff forgotten", func() bool { return len(e2.d.workers.reg.snapshot().Handoffs) == 0 })
}

// TestShutdownOrder: the last started stops first; the master last.
func TestShutdownOrder(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(map[string]string{"master": masterWithManager}), nil)
	for _, id := range []string{"a1", "a2"} {
		if _, err := e.client.Manage(context.Background(), "master", control.AgentRequest{Action: "spawn", Template: "worker", AgentID: id}); err != nil {
			t.Fatal(err)
		}
	}
	e.stop()
	var terms []string
	for _, ev := range e.l.eventsCopy() {
		if id, ok := strings.CutPrefix(ev, "term "); ok {
			terms = append(terms, id)
		}
	}
	if !slices.Equal(terms, []string{"a2", "a1", "master"}) {
		t.Fatalf("stop order %v", terms)
	}
}

func TestHTTP(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(nil), nil)
	base := e.d.httpd.address()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/healthz"); code != 200 || !strings.Contains(body, `"status": "ok"`) {
		t.Fatalf("healthz %d %s", code, body)
	}
	code, body := get("/metrics")
	for _, want := range []string{
		"# TYPE openstarry_agent_up gauge",
		`openstarry_agent_up{agent="master",role="master",template="master"} 1`,
		`openstarry_agent_state{agent="master",state="running"} 1`,
		`openstarry_agent_queue_depth{agent="master",role="master",template="master"} 2`,
		`openstarry_boot_phase_duration_seconds{phase="3",name="master"}`,
		"# TYPE openstarry_agent_save_duration_seconds histogram",
		`openstarry_agent_save_duration_seconds_bucket{agent="master",le="0.005"} 1`,
		`openstarry_agent_save_duration_seconds_count{agent="master"} 1`,
	} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("metrics lack %q:\n%s", want, body)
		}
	}
	if n := strings.Count(body, "# TYPE openstarry_agent_save_duration_seconds "); n != 1 {
		t.Errorf("%d TYPE lines for the histogram", n)
	}
	// Pass-through to the agent's API.
	resp, err := http.Post(base+"/agents/master/tasks", "application/json", strings.NewReader(`{"task_id":"p1","input":"x"}`))
	if err != nil || resp.StatusCode != 202 {
		t.Fatalf("proxied task: %v %v", resp, err)
	}
	resp.Body.Close()
	if _, ok := e.agents.task("master", "p1"); !ok {
		t.Fatal("task not proxied")
	}
	if code, body := get("/agents/nobody/tasks/x"); code != 404 || !strings.Contains(body, "unknown_agent") {
		t.Fatalf("unknown agent %d %s", code, body)
	}
	if code, body := get("/status"); code != 200 || !strings.Contains(body, `"phases"`) {
		t.Fatalf("status %d %s", code, body)
	}
	// Degraded while the master is stopped.
	if _, err := e.client.Stop(context.Background(), "master"); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/healthz"); code != 503 || !strings.Contains(body, "degraded") {
		t.Fatalf("healthz %d %s", code, body)
	}
	if code, body := get("/agents/master/tasks/p1"); code != 503 || !strings.Contains(body, "agent_not_running") {
		t.Fatalf("stopped agent %d %s", code, body)
	}
}

func TestHTTPToken(t *testing.T) {
	d, err := newDaemon(Options{Config: config.Default(), Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	d.cfg.HTTP.Token = "s3cret"
	h := d.httpd.handler()
	for _, tc := range []struct {
		remote, auth string
		want         int
	}{
		{"127.0.0.1:5", "", 503}, // loopback: no token needed (not booted: 503)
		{"10.0.0.2:5", "", 401},
		{"10.0.0.2:5", "Bearer nope", 401},
		{"10.0.0.2:5", "Bearer s3cret", 503},
	} {
		r, _ := http.NewRequest("GET", "/healthz", nil)
		r.RemoteAddr = tc.remote
		if tc.auth != "" {
			r.Header.Set("Authorization", tc.auth)
		}
		w := &recorder{h: http.Header{}}
		h.ServeHTTP(w, r)
		if w.code != tc.want {
			t.Errorf("%s %q: %d, want %d", tc.remote, tc.auth, w.code, tc.want)
		}
	}
}

type recorder struct {
	h    http.Header
	code int
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(c int)           { r.code = c }

type fakeInfra struct {
	fail    bool
	up      bool
	started bool
	closed  bool
}

func (f *fakeInfra) Name() string { return "fake" }
func (f *fakeInfra) Start(context.Context) error {
	if f.fail {
		return errors.New("no broker today")
	}
	f.started = true
	return nil
}
func (f *fakeInfra) AgentArgs(id, role string) ([]string, []string) {
	return []string{"--broker", "tcp://b:1", "--role-" + role}, []string{"OPENSTARRY_MQTT_PASSWORD=p"}
}
func (f *fakeInfra) Close() error        { f.closed = true; return nil }
func (f *fakeInfra) Status() InfraStatus { return InfraStatus{Up: f.up, Detail: "hub unreachable"} }

func TestInfrastructure(t *testing.T) {
	cfg := testConfig(t)
	bad := &fakeInfra{fail: true}
	err := Run(context.Background(), Options{Config: cfg, Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop(), Infra: []Infrastructure{bad}})
	if err == nil || !strings.Contains(err.Error(), "infrastructure fake: no broker today") || !bad.closed {
		t.Fatalf("err = %v closed=%v", err, bad.closed)
	}
	inf := &fakeInfra{}
	agents := newFakeAgents(t)
	l := newFakeLauncher(agents.srv.URL)
	booted := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{Config: cfg, Resolver: testResolver(nil), Launcher: l, Log: zerolog.Nop(),
			Infra: []Infrastructure{inf}, Booted: func() { close(booted) }})
	}()
	<-booted
	spec := l.launches[0]
	if j := strings.Join(spec.Args, " "); !strings.HasSuffix(j, "--broker tcp://b:1 --role-master") || !slices.Contains(spec.Env, "OPENSTARRY_MQTT_PASSWORD=p") {
		t.Fatalf("args %s env %v", j, spec.Env)
	}
	c, _ := control.Discover(cfg.Data)
	defer c.Close()
	st, _ := c.Status(context.Background())
	resp, err := http.Get(st.HTTP + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 503 || !strings.Contains(string(body), "down: hub unreachable") {
		t.Fatalf("healthz %d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil || !inf.closed {
		t.Fatalf("%v closed=%v", err, inf.closed)
	}
}

// TestAgentTokens: each agent gets its own control token; with it the
// agent may read the status and manage its own workers, and nothing in
// another's name.
func TestAgentTokens(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(map[string]string{"master": masterWithManager}), nil)
	ctx := context.Background()
	tokenOf := func(id string) string {
		e.l.mu.Lock()
		defer e.l.mu.Unlock()
		for _, spec := range e.l.launches {
			if spec.AgentID != id {
				continue
			}
			for _, kv := range spec.Env {
				if tok, ok := strings.CutPrefix(kv, control.EnvToken+"="); ok {
					return tok
				}
			}
		}
		t.Fatalf("no control token in %s's environment", id)
		return ""
	}
	as := func(id string) *control.Client {
		c, err := control.New(e.client.Addr(), tokenOf(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	master := as("master")
	if tokenOf("master") == e.d.ctl.token {
		t.Fatal("the master was handed the operator's token")
	}
	if _, err := master.Status(ctx); err != nil {
		t.Fatalf("status with the master's token: %v", err)
	}
	if _, err := master.Restart(ctx, "master"); !isCode(err, control.CodeForbidden) {
		t.Fatalf("restart with an agent's token: %v", err)
	}
	if _, err := master.Stop(ctx, "master"); !isCode(err, control.CodeForbidden) {
		t.Fatalf("stop with an agent's token: %v", err)
	}
	spawn := control.AgentRequest{Action: control.ActionSpawn, Template: "worker", AgentID: "w1"}
	if _, err := master.Manage(ctx, "w9", spawn); !isCode(err, control.CodeForbidden) {
		t.Fatalf("spawn in another agent's name: %v", err)
	}
	if _, err := master.Manage(ctx, "master", spawn); err != nil {
		t.Fatalf("spawn: %v", err)
	}
	e.waitState("w1", control.StateRunning)
	if got := e.d.super.member("w1").getSpec().Requester; got != "master" {
		t.Fatalf("w1's requester = %q", got)
	}
	// The worker may not stop itself or its siblings; its spawner may.
	w1 := as("w1")
	stop := control.AgentRequest{Action: control.ActionStop, AgentID: "w1"}
	if _, err := w1.Manage(ctx, "w1", stop); !isCode(err, control.CodeForbidden) {
		t.Fatalf("a worker stopping a worker it did not spawn: %v", err)
	}
	if _, err := master.Manage(ctx, "master", stop); err != nil {
		t.Fatalf("the master stopping its worker: %v", err)
	}
	// The operator's token still does everything.
	if _, err := e.client.Restart(ctx, "master"); err != nil {
		t.Fatalf("restart with the operator's token: %v", err)
	}
}

func TestSecretEnvsKept(t *testing.T) {
	tm := &design.Template{Brain: design.Brain{Provider: "openai", APIKeyEnv: "OPENSTARRY_LLM_KEY"},
		Listeners: []design.Listener{{Kind: "webhook", Name: "forge", SecretEnv: "OPENSTARRY_FORGE_SECRET"}},
		Memory:    "qdrant://127.0.0.1:6333/notes?api_key_env=QDRANT_KEY"}
	got := secretEnvs(tm)
	want := []string{"OPENSTARRY_LLM_KEY", "OPENSTARRY_FORGE_SECRET", "QDRANT_KEY"}
	if !slices.Equal(got, want) {
		t.Fatalf("secretEnvs = %v, want %v", got, want)
	}
}

// TestRetirementFinishedAtBoot: a daemon that stopped after recording an
// ephemeral worker's retirement and before deleting its snapshot finishes
// the retirement at its next boot instead of restoring the worker.
func TestRetirementFinishedAtBoot(t *testing.T) {
	cfg := testConfig(t)
	store := cfg.Store[len("memtest://"):]
	res := testResolver(map[string]string{"master": masterWithManager})
	e := startEnv(t, cfg, res, nil)
	if err := e.d.workers.reg.addWorker(regWorker{ID: "w5", Template: "worker", Requester: "master", Created: time.Now()}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.d.workers.reg.setRetiring("w5"); err != nil {
		t.Fatal(err)
	}
	putSnapshot(store, &agent.Snapshot{AgentID: "w5", TickIndex: 3, Status: agent.StatusStopped})
	e.stop()
	e2 := startEnv(t, cfg, res, nil)
	e2.waitState("master", control.StateRunning)
	if e2.d.super.member("w5") != nil {
		t.Fatal("a retiring worker was restored")
	}
	if slices.ContainsFunc(e2.d.workers.reg.snapshot().Workers, func(w regWorker) bool { return w.ID == "w5" }) {
		t.Fatal("the retired worker is still in the registry")
	}
	memMu.Lock()
	_, kept := memSnaps[store]["w5"]
	memMu.Unlock()
	if kept {
		t.Fatal("the retired worker's snapshot was not deleted")
	}
}

// TestHTTPError: the sentinels of the daemon's operations get their status
// and code at the edge, with the operation's message.
func TestHTTPError(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		code   string
		msg    string
	}{
		{ErrStopping, 503, control.CodeStopping, "the daemon is stopping"},
		{ErrBooting, 503, control.CodeStopping, "the daemon is still booting"},
		{badRequest("template %q is not a template name", "../x"), 400, control.CodeBadRequest, `template "../x" is not a template name`},
		{unknownAgent("w9"), 404, control.CodeUnknownAgent, "no agent w9 in this daemon"},
		{refuse(ErrConflict, "agent w1 is already running"), 409, control.CodeConflict, "agent w1 is already running"},
		{refuse(ErrForbidden, "no tool"), 403, control.CodeForbidden, "no tool"},
		{refuse(ErrNotWorker, "the master"), 403, control.CodeBadRequest, "the master"},
		{refuse(ErrTemplateRefused, "not a worker template"), 403, control.CodeTemplate, "not a worker template"},
		{refuse(ErrTemplate, "template x: not found"), 422, control.CodeTemplate, "template x: not found"},
		{fmt.Errorf("stop w1: %w", ErrStopping), 503, control.CodeStopping, "stop w1: the daemon is stopping"},
		{&control.Error{Status: 502, Code: "agent_unreachable", Msg: "down"}, 502, "agent_unreachable", "down"},
		{errors.New("disk full"), 500, control.CodeInternal, "disk full"},
	} {
		t.Run(tc.msg, func(t *testing.T) {
			ce := httpError(tc.err)
			if ce.Status != tc.status || ce.Code != tc.code || ce.Msg != tc.msg {
				t.Fatalf("httpError(%v) = %d %s %q, want %d %s %q", tc.err, ce.Status, ce.Code, ce.Msg, tc.status, tc.code, tc.msg)
			}
		})
	}
}

// TestLaunchSpecDigest: an agent process gets its frozen blueprint with the
// digest of the bytes the daemon validated, so that it checks the digest
// instead of validating the template again.
func TestLaunchSpecDigest(t *testing.T) {
	d, err := newDaemon(Options{Config: testConfig(t), Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	spec := agentSpec{Blueprint: "/data/run/blueprints/w1/worker.json", Digest: "sha256:abc"}
	args := d.specs.launchSpec("w1", control.RoleWorker, spec).Args
	i := slices.Index(args, "--template-digest")
	if i < 0 || i+1 >= len(args) || args[i+1] != spec.Digest || !slices.Contains(args, spec.Blueprint) {
		t.Fatalf("args %q: no --template-digest %s beside the blueprint", args, spec.Digest)
	}
}

// TestStatusWhileListenerStarts: the control API answers status (with the
// HTTP listener's address) from the moment it starts, while the boot is
// still opening the HTTP listener; under -race, an address read without
// the listener's lock fails this test.
func TestStatusWhileListenerStarts(t *testing.T) {
	cfg := config.Default()
	cfg.Data = t.TempDir()
	cfg.HTTP.Listen = "127.0.0.1:0"
	d, err := newDaemon(Options{Config: cfg, Resolver: testResolver(nil), Launcher: newFakeLauncher(""), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() {
		var last string
		for range 200 {
			last = d.httpd.report.status(context.Background(), false).HTTP
		}
		done <- last
	}()
	var closers []func()
	if err := d.httpd.serve(func(f func()) { closers = append(closers, f) }); err != nil {
		t.Fatal(err)
	}
	<-done
	for _, f := range closers {
		f()
	}
	if got := d.httpd.report.status(context.Background(), false).HTTP; !strings.HasPrefix(got, "http://127.0.0.1:") {
		t.Fatalf("status says the listener is at %q after it started", got)
	}
}
