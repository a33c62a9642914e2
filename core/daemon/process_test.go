package daemon

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/portguard"
)

// TestMain doubles as the fake agent process of the ExecLauncher tests.
func TestMain(m *testing.M) {
	if mode := os.Getenv("OSD_HELPER"); mode != "" {
		helper(mode)
		return
	}
	os.Exit(portguard.Run(m)) // no test dials 127.0.0.1:1883 or :7777
}

func helper(mode string) {
	switch mode {
	case "ready":
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, `{"level":"debug","message":"chatter"}`)
		fmt.Fprintln(os.Stderr, strings.Repeat("x", 200<<10)) // longer than maxLine: drained
		fmt.Fprintln(os.Stderr, `{"level":"error","error":"disk slow","message":"save took long"}`)
		fmt.Fprintln(os.Stderr, `{"level":"info","addr":"http://127.0.0.1:1234","message":"listening on http://127.0.0.1:1234"}`)
		eof := make(chan struct{})
		go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(eof) }()
		select {
		case <-sig:
			fmt.Fprintln(os.Stderr, `{"level":"info","agent":"x","message":"stopped cleanly"}`)
			os.Exit(0)
		case <-eof:
			os.Exit(7)
		}
	case "fail":
		fmt.Fprintln(os.Stderr, `{"level":"info","message":"starting agent"}`)
		fmt.Fprintln(os.Stderr, "openstarry: template master: boom")
		// GODEBUG's schedtrace on a machine up for 24.8 days: not last words.
		fmt.Fprintln(os.Stderr, "SCHED 2147483647ms: gomaxprocs=1 idleprocs=1 threads=5 spinningthreads=0 needspinning=0 idlethreads=3 runqueue=0 [0 0]")
		os.Exit(1)
	case "stubborn":
		signal.Ignore(syscall.SIGTERM)
		fmt.Fprintln(os.Stderr, `{"level":"info","addr":"http://127.0.0.1:9","message":"listening on http://127.0.0.1:9"}`)
		time.Sleep(time.Minute)
	}
}

func launchHelper(t *testing.T, mode string, sink io.Writer) Process {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	l := &ExecLauncher{Path: exe, Sink: sink, MinLevel: zerolog.InfoLevel}
	p, err := l.Launch(LaunchSpec{AgentID: "h1", Args: []string{"-test.run=^$"}, Env: append(os.Environ(), "OSD_HELPER="+mode)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill(); <-p.Done() })
	return p
}

func waitDone(t *testing.T, p Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("process did not end")
	}
}

func TestExecLauncherReadyAndTerminate(t *testing.T) {
	sink := &logbuf.Buffer{}
	p := launchHelper(t, "ready", sink)
	select {
	case addr := <-p.Ready():
		if addr != "http://127.0.0.1:1234" {
			t.Fatalf("addr %q", addr)
		}
	case <-p.Done():
		t.Fatalf("exited: %v", p.ExitError())
	case <-time.After(10 * time.Second):
		t.Fatal("not ready")
	}
	if err := p.Terminate(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
	want := 0
	if runtime.GOOS == "windows" {
		want = 7 // stdin closed
	}
	if p.ExitCode() != want || p.LastError() != "save took long: disk slow" {
		t.Fatalf("code %d err %v last %q", p.ExitCode(), p.ExitError(), p.LastError())
	}
	logs := sink.String()
	if strings.Contains(logs, "chatter") {
		t.Error("a debug line was forwarded at info level")
	}
	if !strings.Contains(logs, `{"agent":"h1","level":"info","addr"`) || !strings.Contains(logs, `{"level":"info","agent":"x","message":"stopped cleanly"}`) {
		t.Errorf("agent label not added (or added twice):\n%.2000s", logs)
	}
}

func TestExecLauncherStdinEOF(t *testing.T) {
	p := launchHelper(t, "ready", nil)
	<-p.Ready()
	if err := p.(*execProcess).closeStdin(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
	if p.ExitCode() != 7 {
		t.Fatalf("code %d", p.ExitCode())
	}
}

func TestExecLauncherFailure(t *testing.T) {
	sink := &logbuf.Buffer{}
	p := launchHelper(t, "fail", sink)
	waitDone(t, p)
	if p.ExitCode() != 1 || p.LastError() != "template master: boom" || p.ExitError() == nil {
		t.Fatalf("code %d last %q", p.ExitCode(), p.LastError())
	}
	if !strings.Contains(sink.String(), `"message":"template master: boom"`) {
		t.Fatalf("the error line was not forwarded as JSON:\n%s", sink.String())
	}
	if strings.Contains(sink.String(), "SCHED") {
		t.Fatalf("the runtime's scheduler line was forwarded at info level:\n%s", sink.String())
	}
}

func TestExecLauncherKill(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("SIGTERM")
	}
	p := launchHelper(t, "stubborn", nil)
	<-p.Ready()
	_ = p.Terminate()
	select {
	case <-p.Done():
		t.Fatal("ignored SIGTERM but exited")
	case <-time.After(100 * time.Millisecond):
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
	if p.ExitCode() != -1 || !strings.Contains(p.ExitError().Error(), "killed") {
		t.Fatalf("code %d err %v", p.ExitCode(), p.ExitError())
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("second kill: %v", err)
	}
}
