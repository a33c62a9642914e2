package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestServiceProgram: Start does not block (it returns while the daemon
// runs); Stop cancels the daemon and waits for it, to a deadline.
func TestServiceProgram(t *testing.T) {
	running, stopped := make(chan struct{}), make(chan struct{})
	p := &program{log: zerolog.Nop(), deadline: 2 * time.Second, run: func(ctx context.Context) error {
		close(running)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // the agents stopping
		close(stopped)
		return nil
	}}
	// The daemon runs until Stop cancels it: a Start that waited for it
	// would never return.
	started := make(chan error, 1)
	go func() { started <- p.Start(nil) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Start blocks while the daemon runs")
	}
	<-running
	select {
	case <-stopped:
		t.Fatal("the daemon stopped before Stop")
	default:
	}
	if err := p.Stop(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the daemon stopped")
	}

	// A daemon that does not stop: Stop gives up at its deadline.
	release := make(chan struct{})
	defer close(release)
	hung := &program{log: zerolog.Nop(), deadline: 50 * time.Millisecond, run: func(ctx context.Context) error {
		<-ctx.Done()
		<-release
		return errors.New("late")
	}}
	_ = hung.Start(nil)
	if err := hung.Stop(nil); err == nil || !strings.Contains(err.Error(), "did not stop within") {
		t.Fatalf("deadline: %v", err)
	}
	if err := (&program{}).Stop(nil); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
}

func TestServiceConfig(t *testing.T) {
	c := serviceConfig("/etc/o.yaml", "/var/lib/openstarry", "openstarry")
	if got := strings.Join(c.Arguments, " "); got != "start --config /etc/o.yaml --data /var/lib/openstarry" || c.Name != "openstarry" || c.UserName != "openstarry" {
		t.Fatalf("%+v", c)
	}
	if c := serviceConfig("", "/d", ""); strings.Join(c.Arguments, " ") != "start --data /d" {
		t.Fatalf("%+v", c.Arguments)
	}
}
