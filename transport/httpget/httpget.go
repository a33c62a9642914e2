// Package httpget is the http_get tool: a GET of a URL under the agent's
// template's http_allowlist, redirects included, answering the status, the
// content type and up to 64 KiB of the body as text.
//
// It registers itself in the tool registry (core/tool) from init, like any
// other plugin; a binary that does not import it has no http_get, and the
// kernel, which only runs the tools its host resolved, never links net/http.
package httpget

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/openstarry/openstarry-edge/core/tool"
)

func init() {
	tool.Register(tool.Tool{
		Name: "http_get",
		Description: `Fetch a URL with GET; only URLs under the template's http_allowlist are allowed. ` +
			`args: {"url": absolute http(s) URL}. Answers status, content_type and up to 64 KiB of the body as text. Idempotent.`,
		Idempotent: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"url":{"type":"string","description":"absolute http or https URL"}},` +
			`"required":["url"],"additionalProperties":false}`),
		Run: httpGet,
	})
}

const maxHTTPBody = 64 << 10

// httpClient fetches for http_get; redirects are followed only inside the
// allowlist (checked per request in httpGet).
var httpClient = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}

// Allowed reports whether u is under one of the prefixes: the same scheme,
// host and port, and a path at or below the prefix's path.
func Allowed(u *url.URL, prefixes []string) bool {
	for _, p := range prefixes {
		pu, err := url.Parse(p)
		if err != nil || pu.Host == "" {
			continue
		}
		if !strings.EqualFold(pu.Scheme, u.Scheme) || !strings.EqualFold(pu.Host, u.Host) || u.User != nil {
			continue
		}
		pp := pu.EscapedPath()
		up := u.EscapedPath()
		if pp == "" || pp == "/" || up == pp || strings.HasPrefix(up, strings.TrimSuffix(pp, "/")+"/") {
			return true
		}
	}
	return false
}

func httpGet(ctx context.Context, env tool.Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		URL string `json:"url"`
	}
	if err := tool.DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	allow, _ := env.Services[tool.ServiceHTTPAllowlist].([]string)
	if len(allow) == 0 {
		return nil, errors.New("http_get is not allowed any URL: the template has no http_allowlist")
	}
	u, err := url.Parse(args.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("bad arguments: url %q is not an absolute http or https URL", args.URL)
	}
	if !Allowed(u, allow) {
		return nil, fmt.Errorf("url %s is not in the http_allowlist (%s)", u.Redacted(), strings.Join(allow, ", "))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	c := *httpClient
	c.CheckRedirect = func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("more than 5 redirects")
		}
		if !Allowed(r.URL, allow) {
			return fmt.Errorf("redirect to %s, outside the http_allowlist", r.URL.Redacted())
		}
		return nil
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPBody+1))
	if err != nil {
		return nil, err
	}
	truncated := len(body) > maxHTTPBody
	if truncated {
		body = body[:maxHTTPBody]
	}
	text := string(body)
	if !utf8.ValidString(text) {
		text = strings.ToValidUTF8(text, "\uFFFD")
	}
	return json.Marshal(map[string]any{"url": u.Redacted(), "status": resp.StatusCode,
		"content_type": resp.Header.Get("Content-Type"), "body": text, "truncated": truncated})
}
