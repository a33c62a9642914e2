// Package webhook is the listener plugin "webhook": it takes tasks for its
// agent over HTTP POST from one named source (a forge, a CI system, a
// sensor gateway) that signs each body with a shared secret, GitHub-style:
//
//	X-Hub-Signature-256: sha256=<hex HMAC-SHA256(secret, body)>
//
// A delivery is answered only after its task is durable in the agent's
// snapshot (202), or known already (200): the delivery id (X-GitHub-Delivery,
// X-Delivery-ID or, without one, the body's digest) becomes the task id, so a
// source that redelivers never runs a task twice. A missing or wrong
// signature is answered 401 and logged; nothing is queued.
//
// Replays: a signature seen within the listener's replay window (default
// 72h, remembered in DATA/agents/{id}/listeners/webhook-{name}.seen across
// restarts) under another task id is refused 409 replayed, so a captured
// delivery sent again with a new or no delivery id does not run again.
// A source that sends X-Signature-Timestamp (unix seconds) signs
// "{timestamp}.{body}" instead of the body, and a timestamp more than
// TimestampTolerance from the device's clock is refused 401.
package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "listener.webhook",
		Description: "tasks over HTTP POST signed with HMAC-SHA256 (X-Hub-Signature-256)",
		New:         plugin.ListenerOpener(Listen),
	})
}

// MaxConns bounds the connections one webhook listener serves at once; one
// more is answered 503 too_many_connections and closed at once (httpx.Listen)
// rather than left waiting in the kernel's queue.
const MaxConns = 64

// DefaultReplayWindow is how long a delivery's signature is remembered when
// the template sets no replay_window.
const DefaultReplayWindow = 72 * time.Hour

// TimestampTolerance is how far a signed X-Signature-Timestamp may be from
// the device's clock.
const TimestampTolerance = 5 * time.Minute

// TimestampHeader carries the unix time (seconds) a source signed with the
// body; the signature is then HMAC(secret, timestamp + "." + body).
const TimestampHeader = "X-Signature-Timestamp"

type listener struct {
	name      string
	secret    []byte
	env       plugin.ListenerEnv
	srv       *http.Server
	ln        net.Listener
	done      chan struct{}
	seen      *seen
	requireTS bool
	now       func() time.Time
}

// Listen starts a webhook listener. The secret comes from the environment
// variable cfg.SecretEnv and must not be empty.
func Listen(ctx context.Context, cfg design.Listener, env plugin.ListenerEnv) (plugin.Listener, error) {
	secret := os.Getenv(cfg.SecretEnv)
	if cfg.SecretEnv == "" || secret == "" {
		return nil, fmt.Errorf("webhook %s: the secret's environment variable %q is empty: set it to the secret the source signs with", cfg.Name, cfg.SecretEnv)
	}
	window := DefaultReplayWindow
	if cfg.ReplayWindow != "" {
		w, err := time.ParseDuration(cfg.ReplayWindow)
		if err != nil || w <= 0 {
			return nil, fmt.Errorf("webhook %s: replay_window %q: want a positive duration such as 72h", cfg.Name, cfg.ReplayWindow)
		}
		window = w
	}
	seenPath := ""
	if env.Dir != "" {
		seenPath = filepath.Join(env.Dir, "webhook-"+cfg.Name+".seen")
	}
	sn, err := openSeen(seenPath, window, time.Now())
	if err != nil {
		return nil, fmt.Errorf("webhook %s: the replay record: %w", cfg.Name, err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		sn.close()
		return nil, fmt.Errorf("webhook %s: %w", cfg.Name, err)
	}
	l := &listener{name: cfg.Name, secret: []byte(secret), env: env, done: make(chan struct{}),
		ln:   httpx.Listen(ln, httpx.Limits{MaxConns: MaxConns}, false, env.Log),
		seen: sn, requireTS: cfg.RequireTimestamp, now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("/hooks/"+cfg.Name, l.serve)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route: webhooks are POST /hooks/"+cfg.Name)
	})
	l.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    32 << 10,
	}
	go func() {
		defer close(l.done)
		_ = l.srv.Serve(l.ln)
	}()
	return l, nil
}

func (l *listener) Addr() string { return "http://" + l.ln.Addr().String() + "/hooks/" + l.name }

func (l *listener) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.srv.Shutdown(ctx)
	<-l.done
	l.seen.close()
	return err
}

func (l *listener) serve(w http.ResponseWriter, r *http.Request) {
	log := l.env.Log
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", "webhooks are POST")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, int64(l.env.MaxTaskBytes)+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_body", "reading the body: "+err.Error())
		return
	}
	if len(body) > l.env.MaxTaskBytes {
		// Read a bounded amount more, so the client sees the answer
		// instead of a reset connection.
		_, _ = io.CopyN(io.Discard, r.Body, 1<<20)
		log.Warn().Str("remote", r.RemoteAddr).Msg("webhook: body too large")
		writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("body larger than %d bytes", l.env.MaxTaskBytes))
		return
	}
	ts := r.Header.Get(TimestampHeader)
	if ts == "" && l.requireTS {
		log.Warn().Str("remote", r.RemoteAddr).Str("source", l.name).Msg("webhook: no signed timestamp; delivery refused")
		writeError(w, http.StatusUnauthorized, "missing_timestamp", "this source must send "+TimestampHeader+" and sign it with the body")
		return
	}
	mac, ok := l.signed(r.Header.Get("X-Hub-Signature-256"), ts, body)
	if !ok {
		log.Warn().Str("remote", r.RemoteAddr).Str("source", l.name).Msg("webhook: bad or missing signature; delivery refused")
		writeError(w, http.StatusUnauthorized, "bad_signature", "X-Hub-Signature-256 is missing or does not match the body")
		return
	}
	now := l.now()
	if ts != "" {
		sec, err := strconv.ParseInt(ts, 10, 64)
		if d := now.Sub(time.Unix(sec, 0)); err != nil || d > TimestampTolerance || d < -TimestampTolerance {
			log.Warn().Str("remote", r.RemoteAddr).Str("source", l.name).Str("timestamp", ts).Msg("webhook: signed timestamp out of range; delivery refused")
			writeError(w, http.StatusUnauthorized, "stale_timestamp",
				fmt.Sprintf("%s %q is more than %s from this device's clock (%d)", TimestampHeader, ts, TimestampTolerance, now.Unix()))
			return
		}
	}
	var payload json.RawMessage
	if err := json.Unmarshal(body, &payload); err != nil {
		writeError(w, http.StatusBadRequest, "bad_json", "the body is not JSON: "+err.Error())
		return
	}
	event := r.Header.Get("X-GitHub-Event")
	if event == "" {
		event = r.Header.Get("X-Event")
	}
	input, _ := json.Marshal(map[string]any{"source": l.name, "event": event, "payload": payload})
	task := &agent.Task{TaskID: l.taskID(r, body), Type: "webhook." + l.name, Input: input}
	sigSum := sha256.Sum256(mac)
	prev, err := l.seen.take(hex.EncodeToString(sigSum[:]), task.TaskID, now)
	if err != nil {
		log.Error().Err(err).Str("task", task.TaskID).Msg("webhook: delivery not recorded")
		writeError(w, http.StatusInternalServerError, "not_durable", err.Error())
		return
	}
	if prev != "" {
		log.Warn().Str("remote", r.RemoteAddr).Str("source", l.name).Str("task", task.TaskID).Str("first", prev).
			Msg("webhook: a signature already taken within the replay window; delivery refused")
		writeError(w, http.StatusConflict, "replayed",
			"this signed body was already delivered as task "+prev+" within the replay window; a replay is refused")
		return
	}
	ev, err := agent.TaskEvent(task, "webhook:"+l.name, time.Now().UnixMilli())
	if err != nil {
		writeError(w, http.StatusBadRequest, "bad_task", err.Error())
		return
	}
	res := l.env.Submit(r.Context(), ev)
	switch {
	case res.Err == nil && res.Duplicate:
		writeJSON(w, http.StatusOK, res.State)
	case res.Err == nil:
		log.Info().Str("task", task.TaskID).Str("event", event).Msg("webhook: delivery queued")
		writeJSON(w, http.StatusAccepted, res.State)
	case errors.Is(res.Err, agent.ErrQueueFull):
		writeError(w, http.StatusServiceUnavailable, "queue_full", res.Err.Error())
	case errors.Is(res.Err, agent.ErrStopped):
		writeError(w, http.StatusServiceUnavailable, "stopping", res.Err.Error())
	default:
		log.Error().Err(res.Err).Str("task", task.TaskID).Msg("webhook: delivery not durable")
		writeError(w, http.StatusInternalServerError, "not_durable", res.Err.Error())
	}
}

// signed reports whether header is "sha256=" and the hex HMAC of body, or
// of ts + "." + body when ts is not empty, and returns that HMAC.
func (l *listener) signed(header, ts string, body []byte) ([]byte, bool) {
	hexSum, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return nil, false
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return nil, false
	}
	mac := hmac.New(sha256.New, l.secret)
	if ts != "" {
		mac.Write([]byte(ts + "."))
	}
	mac.Write(body)
	want := mac.Sum(nil)
	return want, hmac.Equal(got, want)
}

// taskID names the delivery: the source's delivery id when it sends a valid
// one, else the digest of the body, so a redelivery is the same task.
func (l *listener) taskID(r *http.Request, body []byte) string {
	for _, h := range []string{"X-GitHub-Delivery", "X-Delivery-ID"} {
		if d := r.Header.Get(h); d != "" {
			if id := l.name + "-" + d; agent.ValidateID(id) == nil {
				return id
			}
		}
	}
	sum := sha256.Sum256(body)
	return l.name + "-" + hex.EncodeToString(sum[:12])
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, code int, errCode, msg string) {
	writeJSON(w, code, map[string]string{"error": msg, "code": errCode})
}
