package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestListenerErrors: every route of the daemon's HTTP listener and of its
// control API answers errors as one line of {"error","code"}, unknown
// routes and wrong methods included; an oversized manage body is answered
// too_large.
func TestListenerErrors(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(map[string]string{"master": masterWithManager}), nil)
	ctl := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", strings.TrimPrefix(e.client.Addr(), "unix://"))
	}}}
	if !strings.HasPrefix(e.client.Addr(), "unix://") {
		t.Skip("the control API is on a unix socket here only")
	}
	token := e.d.ctl.token
	for _, tc := range []struct {
		name, method, url, body string
		auth                    bool
		status                  int
		code                    string
	}{
		{"http: unknown route", "GET", e.d.httpd.address() + "/nope", "", false, 404, httpx.CodeNotFound},
		{"http: root", "GET", e.d.httpd.address() + "/", "", false, 404, httpx.CodeNotFound},
		{"http: wrong method", "POST", e.d.httpd.address() + "/healthz", "{}", false, 405, httpx.CodeMethodNotAllowed},
		{"http: unknown agent", "GET", e.d.httpd.address() + "/agents/ghost/snapshot", "", false, 404, control.CodeUnknownAgent},
		{"control: no token", "GET", "http://d/v1/status", "", false, 401, control.CodeUnauthorized},
		{"control: unknown route", "GET", "http://d/v1/nope", "", true, 404, httpx.CodeNotFound},
		{"control: wrong method", "GET", "http://d/v1/manage", "", true, 405, httpx.CodeMethodNotAllowed},
		{"control: unknown agent", "POST", "http://d/v1/agents/ghost/stop", "", true, 404, control.CodeUnknownAgent},
		{"control: bad json", "POST", "http://d/v1/manage", "{", true, 400, control.CodeBadRequest},
		{"control: too large", "POST", "http://d/v1/manage", `{"action":"spawn","task":"` + strings.Repeat("x", 4<<20) + `"}`, true, 400, httpx.CodeTooLarge},
	} {
		req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
		if tc.auth {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		hc := http.DefaultClient
		if strings.HasPrefix(tc.url, "http://d/") {
			hc = ctl
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var got struct{ Error, Code string }
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if resp.StatusCode != tc.status || dec.Decode(&got) != nil || got.Code != tc.code || got.Error == "" ||
			bytes.Count(body, []byte("\n")) != 1 {
			t.Errorf("%s: %d %q, want %d %s on one line", tc.name, resp.StatusCode, body, tc.status, tc.code)
		}
	}
}

// TestListenerLimits: the daemon's HTTP listener and control API cut a
// body sent too slowly and hold their connection cap.
func TestListenerLimits(t *testing.T) {
	lim := httpx.Limits{BodyTimeout: 300 * time.Millisecond, MaxConns: 3, ReadHeaderTimeout: 5 * time.Second}
	e := startEnvWith(t, testConfig(t), testResolver(nil), nil, func(o *Options) { o.HTTPLimits = lim })
	if !strings.HasPrefix(e.client.Addr(), "unix://") {
		t.Skip("the control API is on a unix socket here only")
	}
	for _, l := range []struct{ name, network, addr, path string }{
		{"http", "tcp", strings.TrimPrefix(e.d.httpd.address(), "http://"), "/agents/master/tasks"},
		{"control", "unix", strings.TrimPrefix(e.client.Addr(), "unix://"), "/v1/manage"},
	} {
		t.Run(l.name, func(t *testing.T) {
			dial := func() net.Conn {
				c, err := net.Dial(l.network, l.addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				return c
			}
			// A slow body: one byte every 100 ms of 100 announced.
			c := dial()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n", l.path, e.d.ctl.token)
			closed := make(chan struct{})
			go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
			sent := 0
		send:
			for ; sent < 100; sent++ {
				if _, err := c.Write([]byte("x")); err != nil {
					break
				}
				select {
				case <-closed:
					break send
				case <-time.After(100 * time.Millisecond):
				}
			}
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("the slow body's connection is still open")
			}
			if sent >= 30 {
				t.Fatalf("a slow body was read for %d bytes (~%d ms)", sent, sent*100)
			}
			// The cap: three idle connections, then a fourth is refused.
			for range 3 {
				dial()
			}
			// The accept loop may not have taken all idle ones yet.
			var status int
			if wait.Poll(5*time.Second, func() error {
				c := dial()
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				status = resp.StatusCode
				resp.Body.Close()
				c.Close()
				if status != http.StatusServiceUnavailable {
					return errors.New("not refused")
				}
				return nil
			}) != nil {
				t.Fatalf("over the cap: %d", status)
			}
		})
	}
}
