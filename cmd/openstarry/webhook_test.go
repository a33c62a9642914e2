package main

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

var webhookRe = regexp.MustCompile(`webhook listener on (http://[0-9.:]+/hooks/[a-z0-9_-]+)`)

// hookedTemplate writes the template of an echo agent with a webhook
// listener "forge" whose secret is in FORGE_SECRET (set to s3cret).
func hookedTemplate(t *testing.T) string {
	t.Helper()
	tmpl := filepath.Join(t.TempDir(), "hooked.json")
	if err := os.WriteFile(tmpl, []byte(`{
  "name": "hooked", "version": "1.0.0", "role": "master",
  "brain": {"provider": "echo"}, "system_prompt": "", "tools": [],
  "context_budget": {"max_messages": 20},
  "listeners": [{"kind": "webhook", "name": "forge", "listen": "127.0.0.1:0", "secret_env": "FORGE_SECRET"}]
}`), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FORGE_SECRET", "s3cret")
	return tmpl
}

// A webhook listener started from the template takes a signed delivery once
// (its redelivery is the same task), refuses a bad signature with 401 and a
// log line, and the task runs in the agent like any other.
func TestWebhookListener(t *testing.T) {
	data := t.TempDir()
	tmpl := hookedTemplate(t)
	c := startChild(t, true, "run", "--agent", "hook", "--template", tmpl, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
	base := c.url()
	m := webhookRe.FindStringSubmatch(c.logs())
	if m == nil {
		t.Fatalf("no webhook listener line in the log:\n%s", c.logs())
	}
	hook := m[1]

	deliver := func(body, sig, delivery string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", hook, bytes.NewReader([]byte(body)))
		if sig != "" {
			req.Header.Set("X-Hub-Signature-256", sig)
		}
		if delivery != "" {
			req.Header.Set("X-GitHub-Delivery", delivery)
		}
		req.Header.Set("X-GitHub-Event", "push")
		resp, err := httpc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	sign := func(secret, body string) string {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(body))
		return "sha256=" + hex.EncodeToString(mac.Sum(nil))
	}

	body := `{"ref":"refs/heads/main","after":"abc123"}`
	if code, out := deliver(body, sign("s3cret", body), "d-1"); code != 202 || !strings.Contains(out, `"task_id":"forge-d-1"`) {
		t.Fatalf("signed delivery: %d %s", code, out)
	}
	if code, out := deliver(body, sign("s3cret", body), "d-1"); code != 200 {
		t.Fatalf("redelivery: %d %s (want 200, the same task)", code, out)
	}
	for name, sig := range map[string]string{
		"wrong secret": sign("guess", body),
		"missing":      "",
		"not hex":      "sha256=zz",
		"other algo":   "sha1=" + strings.TrimPrefix(sign("s3cret", body), "sha256="),
	} {
		if code, out := deliver(body, sig, "d-2"); code != 401 || !strings.Contains(out, `"code":"bad_signature"`) {
			t.Fatalf("%s signature: %d %s", name, code, out)
		}
	}
	if code, out := deliver(`not json`, sign("s3cret", `not json`), "d-3"); code != 400 {
		t.Fatalf("unsigned-JSON body: %d %s", code, out)
	}
	// The body signed but tampered with.
	if code, _ := deliver(`{"ref":"refs/heads/evil"}`, sign("s3cret", body), "d-4"); code != 401 {
		t.Fatalf("tampered body: %d", code)
	}

	st := waitTask(t, base, "hook", "forge-d-1")
	var out struct {
		Source  string          `json:"source"`
		Event   string          `json:"event"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(st.Output, &out); err != nil || st.Status != "done" || out.Source != "forge" || out.Event != "push" || !strings.Contains(string(out.Payload), "abc123") {
		t.Fatalf("task result %+v (%v)", st, err)
	}
	for _, id := range []string{"forge-d-2", "forge-d-4"} {
		if code, _, _ := getTask(base, "hook", id); code != 404 {
			t.Fatalf("refused delivery %s was queued (%d)", id, code)
		}
	}
	c.waitLog("bad or missing signature", 5*time.Second) // the refused delivery's log line

	// Without its secret the agent does not start: one clear line.
	t.Setenv("FORGE_SECRET", "")
	c2 := startChild(t, false, "run", "--agent", "hook2", "--template", tmpl, "--data", data, "--listen", "127.0.0.1:0", "--no-mqtt")
	if code, _ := c2.wait(20 * time.Second); code != 1 || !strings.Contains(c2.logs(), `"FORGE_SECRET" is empty`) {
		t.Fatalf("start without a secret: exit %d\n%s", code, c2.logs())
	}
}
