package portguard

import (
	"fmt"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestGuard: a connection to a guarded port is closed and recorded with
// the process that dialed it; a port another process holds is taken once
// it is free.
func TestGuard(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	free := fmt.Sprintf("127.0.0.1:%d", loopback.FreePort(t))
	saved := Ports
	Ports = []string{free, held.Addr().String()}
	t.Cleanup(func() { Ports = saved })
	g := Start()
	defer g.Stop()

	c, err := net.Dial("tcp", free)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the guard answered %d bytes", n)
	}
	c.Close()
	held.Close()
	wait.Until(t, 30*time.Second, "the guard to take the port freed", func() error {
		c, err := net.Dial("tcp", Ports[1])
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	wait.For(t, 30*time.Second, "two hits", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.hits) >= 2
	})
	hits := g.Stop()
	if hits[0].Port != free || !strings.HasPrefix(hits[0].Remote, "127.0.0.1:") {
		t.Fatalf("hit %+v", hits[0])
	}
	if runtime.GOOS == "linux" && !strings.HasPrefix(hits[0].Process, fmt.Sprintf("pid %d: ", os.Getpid())) {
		t.Errorf("the dialing process is %q, want this one (pid %d)", hits[0].Process, os.Getpid())
	}
}
