package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"strings"
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
	submitted := 0
	l, err := Listen(context.Background(), design.Listener{Kind: "webhook", Name: "forge", Listen: "127.0.0.1:0", SecretEnv: "HOOK_SECRET"},
		plugin.ListenerEnv{AgentID: "a", MaxTaskBytes: 1 << 16, Log: zerolog.New(zerolog.NewTestWriter(t)), Dir: t.TempDir(),
			Submit: func(_ context.Context, ev agent.Event) agent.SubmitResult {
				submitted++
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
	body := `{"ref":"main"}`
	mac := hmac.New(sha256.New, []byte("s3cret"))
	mac.Write([]byte(body))
	req, _ := http.NewRequest("POST", hook, strings.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("X-GitHub-Delivery", "d-1")
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(b), `"code":"too_many_connections"`) {
		t.Fatalf("a delivery over the cap: %d %s (submitted %d)", resp.StatusCode, b, submitted)
	}
	// One held over the cap was refused the same way.
	last := held[len(held)-1]
	_ = last.SetReadDeadline(time.Now().Add(30 * time.Second))
	got, _ := io.ReadAll(last)
	if !strings.Contains(string(got), "503 Service Unavailable") {
		t.Fatalf("a connection over the cap read %q", got)
	}
}
