package mcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"sync"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/design"
)

// errNotDelivered marks a request the server cannot have received: a write
// to a server that had exited, or an HTTP server that no longer knows the
// session (404). Sending it again on a new session runs it once.
var errNotDelivered = errors.New("not delivered")

// errClosed is what a call gets after the agent closed the client.
var errClosed = errors.New("the MCP client is closed")

// client keeps a session with one server for the agent's life. When the
// server ends a session (a command that exited, an HTTP server restarted
// and so without the session), the next call opens a new one: a new child,
// or a new initialize. A call that never reached the server is sent again
// on the new session; one the server may have run is not, and fails.
type client struct {
	srv design.MCPServer
	log zerolog.Logger

	mu     sync.Mutex
	cur    *session
	closed bool
}

// connect opens a new session: the child started or the URL set, then the
// initialize handshake.
func (c *client) connect(ctx context.Context) (*session, error) {
	s := newSession()
	switch {
	case len(c.srv.Command) > 0:
		cmd := exec.Command(c.srv.Command[0], c.srv.Command[1:]...)
		cmd.Env = os.Environ()
		keys := make([]string, 0, len(c.srv.Env))
		for k := range c.srv.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			cmd.Env = append(cmd.Env, k+"="+c.srv.Env[k])
		}
		cmd.Stderr = logWriter{c.log}
		conn, err := startStdio(cmd, s)
		if err != nil {
			return nil, err
		}
		s.conn = conn
	case c.srv.URL != "":
		s.conn, s.roundTrip = &httpConn{url: c.srv.URL, s: s}, true
	default:
		return nil, errors.New("neither command nor url")
	}
	if err := s.initialize(ctx, "1"); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// session returns the live session, opening a new one if the last ended.
func (c *client) session(ctx context.Context) (*session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errClosed
	}
	if c.cur != nil {
		select {
		case <-c.cur.done:
		default:
			return c.cur, nil
		}
		c.log.Warn().Str("mcp_server", c.srv.Name).Err(c.cur.err).Msgf("MCP server %s: the session ended; opening a new one", c.srv.Name)
		_ = c.cur.Close() // reaps an exited child
		c.cur = nil
	}
	s, err := c.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconnect: %w", err)
	}
	c.cur = s
	return s, nil
}

// callTool calls a tool on the live session; a call that did not reach the
// server is sent once more, on a new session.
func (c *client) callTool(ctx context.Context, name string, args map[string]any) (*toolResult, error) {
	for attempt := 0; ; attempt++ {
		s, err := c.session(ctx)
		if err != nil {
			return nil, err
		}
		res, err := s.callTool(ctx, name, args)
		if err != nil && errors.Is(err, errNotDelivered) && attempt == 0 {
			continue
		}
		return res, err
	}
}

// Close ends the session for good.
func (c *client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.cur == nil {
		return nil
	}
	err := c.cur.Close()
	c.cur = nil
	return err
}
