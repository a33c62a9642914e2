package control

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// HeaderAgent names the agent a request comes from (the requester of a
// spawn).
const HeaderAgent = "X-Openstarry-Agent"

// ErrNoDaemon is wrapped when no daemon answers on a data directory or the
// environment names none.
var ErrNoDaemon = errors.New("no daemon")

// Client talks to the control API. It is safe for concurrent use.
type Client struct {
	addr  string
	token string
	hc    *http.Client
}

// New returns a client for addr ("unix:///abs/control.sock" or
// "tcp://127.0.0.1:PORT") and token.
func New(addr, token string) (*Client, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("control address %q: %w", addr, err)
	}
	var dial func(ctx context.Context) (net.Conn, error)
	var d net.Dialer
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			path = u.Opaque
		}
		dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", path) }
	case "tcp":
		host := u.Host
		dial = func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "tcp", host) }
	default:
		return nil, fmt.Errorf("control address %q: want unix:///PATH or tcp://HOST:PORT", addr)
	}
	tr := &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{addr: addr, token: token, hc: &http.Client{Transport: tr}}, nil
}

// FromEnv returns a client for the daemon that spawned this process, from
// OPENSTARRY_CONTROL and OPENSTARRY_CONTROL_TOKEN.
func FromEnv() (*Client, error) {
	addr, token := os.Getenv(EnvAddr), os.Getenv(EnvToken)
	if addr == "" {
		return nil, fmt.Errorf("%w: %s is not set (this agent was not started by `openstarry start`)", ErrNoDaemon, EnvAddr)
	}
	return New(addr, token)
}

// Discover returns a client for the daemon running on a data directory,
// from the files it keeps in DATA/run.
func Discover(dataDir string) (*Client, error) {
	runDir := filepath.Join(dataDir, "run")
	tok, err := os.ReadFile(filepath.Join(runDir, TokenFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w runs on data directory %s (no %s)", ErrNoDaemon, dataDir, filepath.Join(runDir, TokenFile))
		}
		return nil, fmt.Errorf("control token: %w", err)
	}
	addr, err := discoverAddr(runDir)
	if err != nil {
		return nil, err
	}
	return New(addr, strings.TrimSpace(string(tok)))
}

// Addr is the address the client dials.
func (c *Client) Addr() string { return c.addr }

// Close releases idle connections.
func (c *Client) Close() { c.hc.CloseIdleConnections() }

func (c *Client) do(ctx context.Context, method, path, requester string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://openstarry"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if requester != "" {
		req.Header.Set(HeaderAgent, requester)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return fmt.Errorf("%w answers at %s: %v", ErrNoDaemon, c.addr, op.Err)
		}
		return fmt.Errorf("control API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("control API: %w", err)
	}
	if resp.StatusCode >= 300 {
		e := &Error{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Msg == "" {
			e.Msg = fmt.Sprintf("control API: %s: %s", resp.Status, bytes.TrimSpace(data))
		}
		return e
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], bytes.TrimSpace(data)...)
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("control API: bad answer: %w", err)
	}
	return nil
}

// Status returns the daemon's state and its agents'.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	var st Status
	if err := c.do(ctx, "GET", "/v1/status", "", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Restart restarts an agent (re-resolving its blueprint), also out of
// crashloop or stopped.
func (c *Client) Restart(ctx context.Context, id string) (*AgentInfo, error) {
	var a AgentInfo
	if err := c.do(ctx, "POST", "/v1/agents/"+url.PathEscape(id)+"/restart", "", nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Stop stops an agent; it stays stopped until Restart.
func (c *Client) Stop(ctx context.Context, id string) (*AgentInfo, error) {
	var a AgentInfo
	if err := c.do(ctx, "POST", "/v1/agents/"+url.PathEscape(id)+"/stop", "", nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

// Manage runs an agent_manager request on behalf of requester and returns
// the daemon's JSON answer: a SpawnResult, a list of AgentInfo, or the
// AgentInfo of a stopped worker.
func (c *Client) Manage(ctx context.Context, requester string, req AgentRequest) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.do(ctx, "POST", "/v1/manage", requester, req, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Session sends a session tool request (op: approval, approach, task) on
// behalf of requester and returns the daemon's JSON answer.
func (c *Client) Session(ctx context.Context, requester, op string, req any) (json.RawMessage, error) {
	var out json.RawMessage
	if err := c.do(ctx, "POST", "/v1/sessions/"+url.PathEscape(op), requester, req, &out); err != nil {
		return nil, err
	}
	return out, nil
}

func hash16(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}
