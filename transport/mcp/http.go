package mcp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
)

// httpClient is shared by every streamable-HTTP server of the process.
var httpClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// httpConn speaks streamable HTTP: every message is a POST to the
// endpoint, answered by one JSON message, by a stream of server-sent events
// that ends with the response, or (a notification or response) by 202.
// The server's own stream (a GET) is not opened: a tool call needs only the
// answers to its POSTs.
type httpConn struct {
	url string
	s   *session

	mu        sync.Mutex
	sessionID string // Mcp-Session-Id, set by the answer to initialize
	version   string // MCP-Protocol-Version, once negotiated
}

func (c *httpConn) setVersion(v string) {
	c.mu.Lock()
	c.version = v
	c.mu.Unlock()
}

func (c *httpConn) request(ctx context.Context, method string, body []byte) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.sessionID != "" {
		req.Header.Set("Mcp-Session-Id", c.sessionID)
	}
	if c.version != "" {
		req.Header.Set("MCP-Protocol-Version", c.version)
	}
	c.mu.Unlock()
	return req, nil
}

func (c *httpConn) send(ctx context.Context, data []byte, id int64) error {
	req, err := c.request(ctx, http.MethodPost, data)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		c.mu.Lock()
		if c.sessionID == "" {
			c.sessionID = sid
		}
		c.mu.Unlock()
	}
	switch {
	case resp.StatusCode == http.StatusAccepted:
		return nil
	case resp.StatusCode == http.StatusNotFound && req.Header.Get("Mcp-Session-Id") != "":
		err := errors.New("the MCP server no longer knows this session (404)")
		c.s.end(err)
		return fmt.Errorf("%w: %w", errNotDelivered, err)
	case resp.StatusCode != http.StatusOK:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("MCP server answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxMessage+1))
		if err != nil {
			return err
		}
		if len(body) > maxMessage {
			return fmt.Errorf("MCP server: an answer over %d bytes", maxMessage)
		}
		if len(bytes.TrimSpace(body)) == 0 {
			return nil
		}
		msgs, err := decodeMessages(body)
		if err != nil {
			return fmt.Errorf("MCP server: %w", err)
		}
		for _, m := range msgs {
			c.s.deliver(m)
		}
		return nil
	case "text/event-stream":
		return readEvents(resp.Body, func(data []byte) (bool, error) {
			msgs, err := decodeMessages(data)
			if err != nil {
				return false, fmt.Errorf("MCP server: %w", err)
			}
			answered := false
			for _, m := range msgs {
				answered = answered || (m.Method == "" && string(m.ID) == strconv.FormatInt(id, 10))
				c.s.deliver(m)
			}
			return answered && id != 0, nil
		})
	default:
		return fmt.Errorf("MCP server answered with content type %q", ct)
	}
}

// readEvents reads server-sent events and hands the data of each to fn,
// until fn reports it has what it waited for, the stream ends or an event
// is over maxMessage.
func readEvents(r io.Reader, fn func(data []byte) (stop bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxMessage)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 { // the end of an event
			if len(data) > 0 {
				stop, err := fn(data)
				if err != nil || stop {
					return err
				}
			}
			data = data[:0]
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if string(field) != "data" { // comments, event:, id:, retry:
			continue
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if len(data) > 0 {
			data = append(data, '\n')
		}
		if len(data)+len(value) > maxMessage {
			return fmt.Errorf("MCP server: an event over %d bytes", maxMessage)
		}
		data = append(data, value...)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(data) > 0 { // a last event without its blank line
		_, err := fn(data)
		return err
	}
	return nil
}

// close ends the session on the server (DELETE, as the protocol asks of a
// client that is done), as far as it can within terminateAfter.
func (c *httpConn) close() error {
	c.mu.Lock()
	sid := c.sessionID
	c.mu.Unlock()
	if sid == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), terminateAfter)
	defer cancel()
	req, err := c.request(ctx, http.MethodDelete, nil)
	if err != nil {
		return nil
	}
	if resp, err := httpClient.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
	}
	return nil
}
