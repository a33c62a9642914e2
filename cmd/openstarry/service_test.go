package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// TestServiceProgram: Start does not block; Stop cancels the daemon and
// waits for it, to a deadline.
func TestServiceProgram(t *testing.T) {
	stopped := make(chan struct{})
	p := &program{log: zerolog.Nop(), deadline: 2 * time.Second, run: func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // the agents stopping
		close(stopped)
		return nil
	}}
	start := time.Now()
	if err := p.Start(nil); err != nil || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("Start: %v after %s", err, time.Since(start))
	}
	if err := p.Stop(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Fatal("Stop returned before the daemon stopped")
	}

	hung := &program{log: zerolog.Nop(), deadline: 50 * time.Millisecond, run: func(ctx context.Context) error {
		<-ctx.Done()
		time.Sleep(time.Second)
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
