package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// TestConnectionCapRefuses: with MaxConns connections held open and more
// waiting, a real delivery is answered 503 too_many_connections at once
// instead of waiting in the kernel's queue for a held one to close.
func TestConnectionCapRefuses(t *testing.T) {
	t.Setenv("HOOK_SECRET", "s3cret")
	var submitted atomic.Int32
	l, err := Listen(context.Background(), design.Listener{Kind: "webhook", Name: "forge", Listen: "127.0.0.1:0", SecretEnv: "HOOK_SECRET"},
		plugin.ListenerEnv{AgentID: "a", MaxTaskBytes: 1 << 16, Log: zerolog.New(zerolog.NewTestWriter(t)), Dir: t.TempDir(),
			Submit: func(_ context.Context, ev agent.Event) agent.SubmitResult {
				submitted.Add(1)
				return agent.SubmitResult{}
			}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	hook := l.Addr()
	addr := strings.TrimSuffix(strings.TrimPrefix(hook, "http://"), "/hooks/forge")
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range MaxConns + 6 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// A real delivery, written on a connection of its own (the answer may
	// come before the request is written: it is sent on accept).
	body := `{"ref":"main"}`
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(body))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = fmt.Fprintf(c, "POST /hooks/forge HTTP/1.1\r\nHost: %s\r\nX-Hub-Signature-256: sha256=%s\r\nX-GitHub-Delivery: d-1\r\nContent-Length: %d\r\n\r\n%s",
		addr, hex.EncodeToString(mac.Sum(nil)), len(body), body)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	b, _ := io.ReadAll(c)
	if !strings.HasPrefix(string(b), "HTTP/1.1 503 ") || !strings.Contains(string(b), `"code":"too_many_connections"`) {
		t.Fatalf("a delivery over the cap read %q (submitted %d)", b, submitted.Load())
	}
	// One held over the cap was refused the same way.
	last := held[len(held)-1]
	_ = last.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, _ := io.ReadAll(last)
	if !strings.Contains(string(got), "503 Service Unavailable") {
		t.Fatalf("a connection over the cap read %q", got)
	}
}
