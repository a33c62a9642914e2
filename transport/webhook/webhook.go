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
	"strings"
	"time"

	"golang.org/x/net/netutil"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "listener.webhook",
		Description: "tasks over HTTP POST signed with HMAC-SHA256 (X-Hub-Signature-256)",
		Listen:      Listen,
	})
}

// MaxConns bounds the connections one webhook listener serves at once.
const MaxConns = 64

type listener struct {
	name   string
	secret []byte
	env    plugin.ListenerEnv
	srv    *http.Server
	ln     net.Listener
	done   chan struct{}
}

// Listen starts a webhook listener. The secret comes from the environment
// variable cfg.SecretEnv and must not be empty.
func Listen(ctx context.Context, cfg design.Listener, env plugin.ListenerEnv) (plugin.Listener, error) {
	secret := os.Getenv(cfg.SecretEnv)
	if cfg.SecretEnv == "" || secret == "" {
		return nil, fmt.Errorf("webhook %s: the secret's environment variable %q is empty: set it to the secret the source signs with", cfg.Name, cfg.SecretEnv)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: %w", cfg.Name, err)
	}
	l := &listener{name: cfg.Name, secret: []byte(secret), env: env, ln: netutil.LimitListener(ln, MaxConns), done: make(chan struct{})}
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
	if !l.signed(r.Header.Get("X-Hub-Signature-256"), body) {
		log.Warn().Str("remote", r.RemoteAddr).Str("source", l.name).Msg("webhook: bad or missing signature; delivery refused")
		writeError(w, http.StatusUnauthorized, "bad_signature", "X-Hub-Signature-256 is missing or does not match the body")
		return
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

// signed reports whether header is "sha256=" and the hex HMAC of body.
func (l *listener) signed(header string, body []byte) bool {
	hexSum, ok := strings.CutPrefix(header, "sha256=")
	if !ok {
		return false
	}
	got, err := hex.DecodeString(hexSum)
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, l.secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
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
