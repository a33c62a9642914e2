package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/configs"
	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/metrics"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// memStore is a Lister store for the interruption scan, registered as
// memtest://NAME; stores of one name share their snapshots.
type memStore struct {
	name string
}

var (
	memMu    sync.Mutex // guards memSnaps
	memSnaps = map[string]map[string]*agent.Snapshot{}
)

func init() {
	plugin.Register(plugin.Info{ID: "storage.memtest", New: plugin.StorageOpener(func(_ context.Context, u *url.URL, _ plugin.Env) (plugin.Storage, error) {
		if u.Host == "fail" {
			return nil, errors.New("cannot open")
		}
		return &memStore{name: u.Host}, nil
	})})
}

func putSnapshot(store string, s *agent.Snapshot) {
	memMu.Lock()
	defer memMu.Unlock()
	if memSnaps[store] == nil {
		memSnaps[store] = map[string]*agent.Snapshot{}
	}
	memSnaps[store][s.AgentID] = s
}

func (m *memStore) Save(_ context.Context, s *agent.Snapshot) error {
	putSnapshot(m.name, s)
	return nil
}
func (m *memStore) Load(_ context.Context, id string) (*agent.Snapshot, error) {
	memMu.Lock()
	defer memMu.Unlock()
	if id == "locked" {
		return nil, fmt.Errorf("memtest: %w", plugin.ErrLocked)
	}
	return memSnaps[m.name][id], nil
}
func (m *memStore) Delete(_ context.Context, id string) error {
	memMu.Lock()
	defer memMu.Unlock()
	delete(memSnaps[m.name], id)
	return nil
}
func (m *memStore) Close() error { return nil }
func (m *memStore) List(context.Context) ([]string, error) {
	memMu.Lock()
	defer memMu.Unlock()
	var ids []string
	for id := range memSnaps[m.name] {
		ids = append(ids, id)
	}
	if m.name == "withlocked" {
		ids = append(ids, "locked")
	}
	return ids, nil
}

// fakeAgents serves the agents' HTTP APIs in-process: tasks are answered
// with their input, each once.
type fakeAgents struct {
	srv *httptest.Server

	mu    sync.Mutex                       // guards tasks, order, fail
	tasks map[string]map[string]agent.Task // agent → task id → task
	order map[string][]string
	fail  map[string]bool // agent → its tasks fail

	// gate, when set, is called at the start of every POST of a task,
	// outside mu; remotes counts the connections those came on.
	gate    func()
	remotes map[string]bool
}

func newFakeAgents(t *testing.T) *fakeAgents {
	f := &fakeAgents{tasks: map[string]map[string]agent.Task{}, order: map[string][]string{}, fail: map[string]bool{},
		remotes: map[string]bool{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /agents/{id}/tasks", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		gate := f.gate
		f.remotes[r.RemoteAddr] = true
		f.mu.Unlock()
		if gate != nil {
			gate()
		}
		id := r.PathValue("id")
		var task agent.Task
		if err := json.NewDecoder(r.Body).Decode(&task); err != nil || task.TaskID == "" {
			w.WriteHeader(400)
			fmt.Fprint(w, `{"code":"bad_json"}`)
			return
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.tasks[id] == nil {
			f.tasks[id] = map[string]agent.Task{}
		}
		if _, dup := f.tasks[id][task.TaskID]; dup {
			w.WriteHeader(200)
			return
		}
		f.tasks[id][task.TaskID] = task
		f.order[id] = append(f.order[id], task.TaskID)
		w.WriteHeader(202)
	})
	mux.HandleFunc("GET /agents/{id}/tasks/{task}", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		task, ok := f.tasks[r.PathValue("id")][r.PathValue("task")]
		if !ok {
			w.WriteHeader(404)
			return
		}
		st := agent.TaskState{TaskID: task.TaskID, Status: agent.ResultDone, Output: task.Input, TickIndex: 7}
		if f.fail[r.PathValue("id")] {
			st.Status, st.Output, st.Error = agent.ResultFailed, nil, "it broke"
		}
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("GET /agents/{id}/snapshot", func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		n := len(f.order[r.PathValue("id")])
		fmt.Fprintf(w, `{"agent_id":%q,"tick_index":%d,"status":"WAITING_FOR_EVENT","event_queue_backup":[{},{}],"outbox":[]}`, r.PathValue("id"), n)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		m := metrics.NewAgent(nil)
		m.Observe(3 * time.Millisecond)
		m.ServeHTTP(w, r)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAgents) task(agentID, taskID string) (agent.Task, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, ok := f.tasks[agentID][taskID]
	return t, ok
}

// Behaviours of fake processes.
const (
	behaveReady = iota // ready at once; exits 0 when terminated
	behaveCrash        // exits 1 at once
	behaveHang         // never ready; ignores Terminate
)

type fakeLauncher struct {
	addr string // the fakeAgents server

	mu       sync.Mutex // guards the fields below
	behave   map[string]int
	launches []LaunchSpec
	live     map[int]*fakeProc
	events   []string // "start ID", "term ID"
	pid      int
}

func newFakeLauncher(addr string) *fakeLauncher {
	return &fakeLauncher{addr: addr, behave: map[string]int{}, live: map[int]*fakeProc{}, pid: 1000}
}

func (l *fakeLauncher) set(id string, b int) {
	l.mu.Lock()
	l.behave[id] = b
	l.mu.Unlock()
}

func (l *fakeLauncher) Launch(spec LaunchSpec) (Process, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pid++
	p := &fakeProc{l: l, id: spec.AgentID, pid: l.pid, ready: make(chan string, 1), done: make(chan struct{})}
	l.launches = append(l.launches, spec)
	l.events = append(l.events, "start "+spec.AgentID)
	l.live[p.pid] = p
	switch l.behave[spec.AgentID] {
	case behaveReady:
		p.ready <- l.addr
	case behaveCrash:
		p.exit(errors.New("exit status 1"), 1, "boom")
	case behaveHang:
		p.hang = true
	}
	return p, nil
}

func (l *fakeLauncher) liveCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.live)
}

func (l *fakeLauncher) eventsCopy() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

type fakeProc struct {
	l     *fakeLauncher
	id    string
	pid   int
	ready chan string
	done  chan struct{}
	hang  bool

	once    sync.Once
	exitErr error
	code    int
	lastErr string
}

// exit is called with l.mu held or from Terminate/Kill.
func (p *fakeProc) exit(err error, code int, last string) {
	p.once.Do(func() {
		p.exitErr, p.code, p.lastErr = err, code, last
		delete(p.l.live, p.pid)
		close(p.done)
	})
}

func (p *fakeProc) PID() int              { return p.pid }
func (p *fakeProc) Ready() <-chan string  { return p.ready }
func (p *fakeProc) Done() <-chan struct{} { return p.done }
func (p *fakeProc) ExitError() error      { return p.exitErr }
func (p *fakeProc) ExitCode() int         { return p.code }
func (p *fakeProc) LastError() string     { return p.lastErr }
func (p *fakeProc) Terminate() error {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	p.l.events = append(p.l.events, "term "+p.id)
	if !p.hang {
		p.exit(nil, 0, "")
	}
	return nil
}
func (p *fakeProc) Kill() error {
	p.l.mu.Lock()
	defer p.l.mu.Unlock()
	p.exit(errors.New("signal: killed"), -1, "")
	return nil
}

// testEnv is a daemon with fakes, running until the test ends.
type testEnv struct {
	t      *testing.T
	d      *Daemon
	l      *fakeLauncher
	agents *fakeAgents
	cfg    *config.Config
	client *control.Client
	cancel context.CancelFunc
	done   chan error
	states chan control.AgentInfo
}

// masterWithManager is a master template that may call agent_manager.
const masterWithManager = `{"name": "master", "version": "2.0.0", "role": "master", "brain": {"provider": "echo"},
 "system_prompt": "m", "tools": ["agent_manager"], "context_budget": {"max_messages": 10}, "workers": ["worker"]}`

func testConfig(t *testing.T) *config.Config {
	cfg := config.Default()
	cfg.Data = shortTempDir(t)
	cfg.Store = "memtest://" + strings.ReplaceAll(t.Name(), "/", "_")
	cfg.HTTP.Listen = "127.0.0.1:0"
	cfg.Supervise.BackoffInitial = 5 * time.Millisecond
	cfg.Supervise.BackoffMax = 20 * time.Millisecond
	cfg.Supervise.CrashloopRestarts = 3
	cfg.Supervise.StopTimeout = 200 * time.Millisecond
	cfg.Supervise.ReadyTimeout = 2 * time.Second
	return cfg
}

// shortTempDir keeps unix socket paths short.
func shortTempDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "osd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func testResolver(extra map[string]string) *design.Resolver {
	fsys := fstest.MapFS{}
	for _, n := range []string{"master.json", "worker.json", "echo.json"} {
		data, _ := configs.Templates.ReadFile("templates/" + n)
		fsys[n] = &fstest.MapFile{Data: data}
	}
	for n, s := range extra {
		fsys[n+".json"] = &fstest.MapFile{Data: []byte(s)}
	}
	return design.NewResolver(design.ResolverOptions{Embedded: fsys})
}

func startEnv(t *testing.T, cfg *config.Config, res Resolver, prepare func(l *fakeLauncher)) *testEnv {
	t.Helper()
	return startEnvWith(t, cfg, res, prepare, nil)
}

// startEnvWith is startEnv with a last word on the daemon's Options.
func startEnvWith(t *testing.T, cfg *config.Config, res Resolver, prepare func(l *fakeLauncher), opts func(*Options)) *testEnv {
	t.Helper()
	agents := newFakeAgents(t)
	l := newFakeLauncher(agents.srv.URL)
	if prepare != nil {
		prepare(l)
	}
	e := &testEnv{t: t, l: l, agents: agents, cfg: cfg, done: make(chan error, 1), states: make(chan control.AgentInfo, 1024)}
	booted := make(chan struct{})
	o := Options{Config: cfg, Resolver: res, Launcher: l, Version: "test",
		Log: zerolog.New(zerolog.NewTestWriter(t)), Booted: func() { close(booted) },
		OnAgentState: func(a control.AgentInfo) {
			select {
			case e.states <- a:
			default:
			}
		}}
	if opts != nil {
		opts(&o)
	}
	d, err := newDaemon(o)
	if err != nil {
		t.Fatal(err)
	}
	e.d = d
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() { e.done <- d.run(ctx) }()
	select {
	case <-booted:
	case err := <-e.done:
		t.Fatalf("daemon ended during boot: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon did not boot")
	}
	e.client, err = control.Discover(cfg.Data)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		e.stop()
		e.client.Close()
	})
	return e
}

func (e *testEnv) stop() {
	e.cancel()
	select {
	case err := <-e.done:
		if err != nil {
			e.t.Errorf("daemon: %v", err)
		}
		e.done <- nil
	case <-time.After(10 * time.Second):
		e.t.Error("daemon did not stop")
	}
}

// waitState waits until agent id is in state.
func (e *testEnv) waitState(id, state string) control.AgentInfo {
	e.t.Helper()
	var info control.AgentInfo
	if err := wait.Poll(10*time.Second, func() error {
		m := e.d.super.member(id)
		if m == nil {
			return errors.New("no such member")
		}
		if info = m.info(); info.State != state {
			return errors.New(info.State)
		}
		return nil
	}); err != nil {
		var got string
		if m := e.d.super.member(id); m != nil {
			got = fmt.Sprintf("%+v", m.info())
		}
		e.t.Fatalf("agent %s never reached %s (now %s)", id, state, got)
	}
	return info
}

func readFile(t *testing.T, parts ...string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(parts...))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
