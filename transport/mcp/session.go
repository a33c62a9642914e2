package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The protocol versions this client speaks, newest first. It asks for the
// first; a server may answer with any of them.
var protocolVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"}

// maxMessage bounds one message from a server (a line over stdio, a body or
// an event over HTTP).
const maxMessage = 16 << 20

// Bounds on listing tools, so that a server that pages forever cannot hold
// an agent's start.
const (
	maxPages = 100
	maxTools = 1000
)

// cancelTimeout bounds telling a server that a request was given up.
const cancelTimeout = time.Second

// message is one JSON-RPC 2.0 message: a request (ID and Method), a
// notification (Method only) or a response (ID and Result or Error).
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

// rpcError is a JSON-RPC error object; it is also the error a call returns
// when the server answers with one.
type rpcError struct {
	Code    int64  `json:"code"`
	Message string `json:"message"`
}

func (e *rpcError) Error() string { return fmt.Sprintf("MCP error %d: %s", e.Code, e.Message) }

// codeMethodNotFound answers a server's request for a feature this client
// does not offer (sampling, roots, elicitation).
const codeMethodNotFound = -32601

// decodeMessages reads one message or a batch (a JSON array of messages,
// which protocol version 2025-03-26 allows).
func decodeMessages(data []byte) ([]message, error) {
	data = bytes.TrimSpace(data)
	if len(data) > 0 && data[0] == '[' {
		var batch []message
		if err := json.Unmarshal(data, &batch); err != nil {
			return nil, fmt.Errorf("bad message batch: %w", err)
		}
		for i := range batch {
			if err := batch[i].check(); err != nil {
				return nil, err
			}
		}
		return batch, nil
	}
	var m message
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("bad message: %w", err)
	}
	if err := m.check(); err != nil {
		return nil, err
	}
	return []message{m}, nil
}

// check rejects what is not a JSON-RPC 2.0 message.
func (m *message) check() error {
	if m.JSONRPC != "2.0" {
		return fmt.Errorf("bad message: jsonrpc is %q, not \"2.0\"", m.JSONRPC)
	}
	if m.Method == "" && len(m.ID) == 0 {
		return errors.New("bad message: neither a method nor an id")
	}
	return nil
}

// A conn carries a session's messages to one server.
type conn interface {
	// send writes one message. id is the request's id, 0 for a
	// notification or a response. Messages from the server reach
	// session.deliver: over stdio from a reader of its own, over HTTP
	// from the answer to this very send, before send returns.
	send(ctx context.Context, data []byte, id int64) error
	// close ends the connection (and reaps a child); it is called once.
	close() error
}

// session is the client side of one MCP connection: it numbers requests,
// hands each response to its caller, and answers the server's own requests
// (ping; anything else is a method this client does not offer).
type session struct {
	conn conn
	// roundTrip: every response arrives while its send runs (HTTP).
	roundTrip bool

	mu      sync.Mutex
	nextID  int64
	pending map[int64]chan *message
	err     error         // why the session ended, once done is closed
	done    chan struct{} // closed when the connection is gone
}

func newSession() *session {
	return &session{pending: map[int64]chan *message{}, done: make(chan struct{})}
}

// call sends method with params and decodes the result into out.
func (s *session) call(ctx context.Context, method string, params, out any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	ch := make(chan *message, 1)
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %w", errNotDelivered, s.err)
	}
	s.nextID++
	id := s.nextID
	s.pending[id] = ch
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, id)
		s.mu.Unlock()
	}()
	data, err := json.Marshal(message{JSONRPC: "2.0", ID: json.RawMessage(strconv.FormatInt(id, 10)), Method: method, Params: raw})
	if err != nil {
		return err
	}
	if err := s.conn.send(ctx, data, id); err != nil {
		if ctx.Err() != nil {
			s.cancelled(id, ctx.Err())
			return ctx.Err()
		}
		return err
	}
	var resp *message
	if s.roundTrip {
		select {
		case resp = <-ch:
		default:
			return fmt.Errorf("%s: the server ended its answer without a response", method)
		}
	} else {
		select {
		case resp = <-ch:
		case <-ctx.Done():
			s.cancelled(id, ctx.Err())
			return ctx.Err()
		case <-s.done:
			return s.err
		}
	}
	if resp.Error != nil {
		return resp.Error
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(resp.Result, out); err != nil {
		return fmt.Errorf("%s: bad result: %w", method, err)
	}
	return nil
}

// notify sends a notification.
func (s *session) notify(ctx context.Context, method string, params any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	data, err := json.Marshal(message{JSONRPC: "2.0", Method: method, Params: raw})
	if err != nil {
		return err
	}
	return s.conn.send(ctx, data, 0)
}

// cancelled tells the server, as far as it can within cancelTimeout, that
// request id was given up, so that it may stop working on it.
func (s *session) cancelled(id int64, why error) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	_ = s.notify(ctx, "notifications/cancelled", map[string]any{"requestId": id, "reason": why.Error()})
}

// deliver handles one message from the server.
func (s *session) deliver(m message) {
	switch {
	case m.Method != "" && len(m.ID) > 0: // a request of the server's
		resp := message{JSONRPC: "2.0", ID: m.ID}
		if m.Method == "ping" {
			resp.Result = json.RawMessage(`{}`)
		} else {
			resp.Error = &rpcError{Code: codeMethodNotFound, Message: "method not found: " + m.Method}
		}
		data, err := json.Marshal(resp)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
			_ = s.conn.send(ctx, data, 0)
			cancel()
		}
	case m.Method != "": // a notification (progress, log lines, list changes): not used
	default: // a response
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		if err != nil {
			return // not an id this client gave
		}
		s.mu.Lock()
		ch := s.pending[id]
		delete(s.pending, id)
		s.mu.Unlock()
		if ch != nil {
			ch <- &m
		}
	}
}

// end marks the session over for err; calls waiting and to come return it.
func (s *session) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
		close(s.done)
	}
}

// initialize opens the session: the initialize request, a check of the
// version the server chose, and the initialized notification.
func (s *session) initialize(ctx context.Context, version string) error {
	var res struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	params := map[string]any{
		"protocolVersion": protocolVersions[0],
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "openstarry", "version": version},
	}
	if err := s.call(ctx, "initialize", params, &res); err != nil {
		return fmt.Errorf("initialize: %w", err)
	}
	if !supported(res.ProtocolVersion) {
		return fmt.Errorf("initialize: the server speaks protocol version %q, this client %v", res.ProtocolVersion, protocolVersions)
	}
	if v, ok := s.conn.(interface{ setVersion(string) }); ok {
		v.setVersion(res.ProtocolVersion) // HTTP names it on every request from now on
	}
	if err := s.notify(ctx, "notifications/initialized", map[string]any{}); err != nil {
		return fmt.Errorf("initialized: %w", err)
	}
	return nil
}

func supported(v string) bool {
	for _, p := range protocolVersions {
		if p == v {
			return true
		}
	}
	return false
}

// remoteTool is a tool as tools/list describes it.
type remoteTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
	Annotations *Annotations    `json:"annotations"`
}

// Annotations are the hints a server gives about a tool; the two that
// decide crash semantics are read.
type Annotations struct {
	ReadOnlyHint   bool `json:"readOnlyHint"`
	IdempotentHint bool `json:"idempotentHint"`
}

// listTools pages through tools/list.
func (s *session) listTools(ctx context.Context) ([]remoteTool, error) {
	var all []remoteTool
	cursor := ""
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, fmt.Errorf("more than %d pages of tools", maxPages)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		var res struct {
			Tools      []remoteTool `json:"tools"`
			NextCursor string       `json:"nextCursor"`
		}
		if err := s.call(ctx, "tools/list", params, &res); err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if t.Name == "" {
				return nil, errors.New("a tool without a name")
			}
		}
		all = append(all, res.Tools...)
		if len(all) > maxTools {
			return nil, fmt.Errorf("more than %d tools", maxTools)
		}
		if res.NextCursor == "" {
			return all, nil
		}
		cursor = res.NextCursor
	}
}

// toolResult is what tools/call answers.
type toolResult struct {
	Content           []content       `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

// content is one part of a tool's result; only text parts are read.
type content struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

func (s *session) callTool(ctx context.Context, name string, args map[string]any) (*toolResult, error) {
	if args == nil {
		args = map[string]any{}
	}
	var res toolResult
	if err := s.call(ctx, "tools/call", map[string]any{"name": name, "arguments": args}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Close ends the session and its connection.
func (s *session) Close() error {
	s.end(errors.New("the MCP session is closed"))
	return s.conn.close()
}
