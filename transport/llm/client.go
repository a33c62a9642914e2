package llm

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// Client talks to one chat completions endpoint. Its fields are set before
// first use and not changed after; a Client is safe for concurrent use.
type Client struct {
	// BaseURL is the server root that /chat/completions is appended to,
	// e.g. http://127.0.0.1:11434/v1.
	BaseURL string
	Model   string
	// APIKey is sent as a bearer token when not empty.
	APIKey string
	// HTTP is the client requests go through; nil means a client of its
	// own (proxies from the environment, never for loopback).
	HTTP *http.Client
	// Timeout bounds one attempt, from sending the request to the last
	// byte of the answer; default 60s.
	Timeout time.Duration
	// MaxRetries is how many times a 429 or 5xx answer is retried; 0
	// means the default, 4; negative means none.
	MaxRetries int
	// BackoffMin and BackoffMax bound the wait between retries when the
	// server gives no Retry-After: BackoffMin doubled at each retry, with
	// jitter, up to BackoffMax. Defaults 500ms and 30s. A Retry-After is
	// honoured up to MaxRetryAfter (default 5m).
	BackoffMin, BackoffMax, MaxRetryAfter time.Duration
	// StreamInterval is the least time between two OnTokens reports of a
	// streamed answer; default 250ms.
	StreamInterval time.Duration
}

// StatusError is an answer the server gave with a status other than 200.
type StatusError struct {
	Code    int
	Message string // the server's error message, or the start of its body
	// Type is the error's type when the server names one, such as
	// llama.cpp's exceed_context_size_error; with it, PromptTokens and
	// ContextTokens are its n_prompt_tokens and n_ctx.
	Type                        string
	PromptTokens, ContextTokens int
}

// ContextExceeded reports whether the server refused the request because
// the prompt does not fit its context (llama.cpp's
// exceed_context_size_error, OpenAI's context_length_exceeded).
func (e *StatusError) ContextExceeded() bool {
	return e.Code == http.StatusBadRequest &&
		(e.Type == "exceed_context_size_error" || e.Type == "context_length_exceeded" ||
			e.Type == "invalid_request_error" && strings.Contains(e.Message, "context length"))
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("model server answered %d %s", e.Code, http.StatusText(e.Code))
	}
	return fmt.Sprintf("model server answered %d %s: %s", e.Code, http.StatusText(e.Code), e.Message)
}

// ErrTimeout is wrapped when an attempt outlives Client.Timeout.
var ErrTimeout = errors.New("model server did not answer in time")

func (c *Client) defaults() (timeout time.Duration, retries int, bmin, bmax, maxRA, interval time.Duration) {
	timeout, retries, bmin, bmax, maxRA, interval = c.Timeout, c.MaxRetries, c.BackoffMin, c.BackoffMax, c.MaxRetryAfter, c.StreamInterval
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	if retries == 0 {
		retries = 4
	} else if retries < 0 {
		retries = 0
	}
	if bmin <= 0 {
		bmin = 500 * time.Millisecond
	}
	if bmax < bmin {
		bmax = max(30*time.Second, bmin)
	}
	if maxRA <= 0 {
		maxRA = 5 * time.Minute
	}
	if interval <= 0 {
		interval = 250 * time.Millisecond
	}
	return
}

var defaultHTTP = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// Chat sends one request and returns the decoded answer. A streamed request
// reports pieces to onTokens as they arrive. A server that cannot be reached
// gives an error wrapping agent.ErrBrainUnavailable at once (the kernel
// decides when to ask again); 429 and 5xx answers are retried here.
func (c *Client) Chat(ctx context.Context, req *chatRequest, onTokens func(int)) (Completion, error) {
	timeout, retries, bmin, bmax, maxRA, interval := c.defaults()
	req.Model = c.Model
	if req.Stream {
		req.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Completion{}, fmt.Errorf("encoding the request: %w", err)
	}
	url := strings.TrimRight(c.BaseURL, "/") + "/chat/completions"
	hc := c.HTTP
	if hc == nil {
		hc = defaultHTTP
	}
	wait := bmin
	var last error
	for attempt := 0; ; attempt++ {
		comp, retryAfter, err := c.attempt(ctx, hc, url, body, req.Stream, timeout, onTokens, interval)
		if err == nil {
			return comp, nil
		}
		last = err
		var se *StatusError
		if !errors.As(err, &se) || !(se.Code == http.StatusTooManyRequests || se.Code >= 500) {
			return Completion{}, err
		}
		if attempt >= retries {
			return Completion{}, fmt.Errorf("giving up after %d attempts: %w", attempt+1, last)
		}
		d := jitter(wait)
		if retryAfter > 0 {
			d = min(retryAfter, maxRA)
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return Completion{}, fmt.Errorf("%w (while waiting to retry: %w)", ctx.Err(), last)
		}
		wait = min(wait*2, bmax)
	}
}

// attempt makes one request. retryAfter is the server's Retry-After, or 0.
func (c *Client) attempt(ctx context.Context, hc *http.Client, url string, body []byte, stream bool,
	timeout time.Duration, onTokens func(int), interval time.Duration) (comp Completion, retryAfter time.Duration, err error) {
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(actx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Completion{}, 0, fmt.Errorf("%w: %w", agent.ErrBrainUnavailable, err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	// A request may be sent again on a new connection when a kept-alive one
	// turns out closed before any answer (llama-server closes idle ones):
	// nothing of a chat completion is durable on the server. net/http
	// treats a request with this header as replayable; a nil value is not
	// sent.
	hreq.Header["Idempotency-Key"] = nil
	if stream {
		hreq.Header.Set("Accept", "text/event-stream")
	} else {
		hreq.Header.Set("Accept", "application/json")
	}
	if c.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	resp, err := hc.Do(hreq)
	if err != nil {
		return Completion{}, 0, c.transportError(ctx, actx, err, timeout)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		se := &StatusError{Code: resp.StatusCode}
		se.Message, se.Type, se.PromptTokens, se.ContextTokens = errorDetails(data)
		return Completion{}, parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), se
	}
	if stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		comp, err = DecodeStream(resp.Body, onTokens, interval)
	} else {
		var data []byte
		data, err = io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
		if err == nil && len(data) > maxResponseBytes {
			err = fmt.Errorf("%w: answer larger than %d bytes", ErrBadResponse, maxResponseBytes)
		}
		if err == nil {
			comp, err = DecodeResponse(data)
		}
	}
	if err != nil && (actx.Err() != nil || dropped(err)) {
		return Completion{}, 0, c.transportError(ctx, actx, err, timeout)
	}
	return comp, 0, err
}

// dropped reports whether err is a connection that closed under the
// exchange: a server killed or restarted while it answered. Nothing of the
// answer is used, so asking again later is safe.
func dropped(err error) bool {
	return errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE)
}

// transportError classifies a failed exchange: the attempt's timeout, the
// caller's cancellation, or a server that cannot be reached.
func (c *Client) transportError(ctx, actx context.Context, err error, timeout time.Duration) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case actx.Err() != nil:
		return fmt.Errorf("%w: no complete answer from %s within %s", ErrTimeout, c.BaseURL, timeout)
	}
	var op *net.OpError
	var dns *net.DNSError
	if errors.As(err, &dns) || (errors.As(err, &op) && op.Op == "dial") {
		return fmt.Errorf("%w: %s: %w", agent.ErrBrainUnavailable, c.BaseURL, err)
	}
	if dropped(err) {
		return fmt.Errorf("%w: %s: the connection closed before the answer was complete: %w", agent.ErrBrainUnavailable, c.BaseURL, err)
	}
	return fmt.Errorf("model server %s: %w", c.BaseURL, err)
}

// errorMessage extracts the message of an error body ({"error": {"message":
// ...}}, {"error": "..."}), or returns the start of the body.
func errorMessage(data []byte) string {
	msg, _, _, _ := errorDetails(data)
	return msg
}

// errorDetails is errorMessage with the error's type and, for a prompt over
// the context, llama.cpp's n_prompt_tokens and n_ctx.
func errorDetails(data []byte) (msg, typ string, nPrompt, nCtx int) {
	var obj struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(data, &obj) == nil && len(obj.Error) > 0 {
		var e struct {
			apiError
			Code          json.RawMessage `json:"code"`
			NPromptTokens int             `json:"n_prompt_tokens"`
			NCtx          int             `json:"n_ctx"`
		}
		if json.Unmarshal(obj.Error, &e) == nil && e.Message != "" {
			typ = e.Type
			var code string
			if typ == "" || json.Unmarshal(e.Code, &code) == nil && code == "context_length_exceeded" {
				typ = cmp.Or(code, typ)
			}
			return e.Message, typ, e.NPromptTokens, e.NCtx
		}
		var s string
		if json.Unmarshal(obj.Error, &s) == nil && s != "" {
			return s, "", 0, 0
		}
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s, "", 0, 0
}

// parseRetryAfter reads a Retry-After header: delay seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(min(n, 86400)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// jitter returns d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}
