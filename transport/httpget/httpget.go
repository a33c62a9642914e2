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

// ErrNotNormal is wrapped by what Normalize refuses.
var ErrNotNormal = errors.New("URL cannot be normalised")

// Normalize returns u in the one form the allowlist is compared in, and
// http_get requests: scheme and host in lower case, no default port, no
// trailing dot on the host, no fragment, and a path with its dot segments
// removed (RFC 3986 5.2.4) after percent-decoding each segment, so that
// "/ok/../x", "/ok/%2e%2e/x" and "/ok/./../x" are all "/x". It refuses
// what servers could read in more than one way: an encoded slash or a
// backslash in a segment ("..%2f", "%5c"), a NUL or control byte, a
// segment of dots and spaces other than "." and "..", ".." above the
// root, user info, a percent sign in the host, and any scheme but http
// and https.
func Normalize(u *url.URL) (*url.URL, error) {
	bad := func(why string) (*url.URL, error) {
		return nil, fmt.Errorf("%w: %s", ErrNotNormal, why)
	}
	n := *u
	n.Scheme = strings.ToLower(u.Scheme)
	if n.Scheme != "http" && n.Scheme != "https" {
		return bad("the scheme is not http or https")
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("not an absolute URL")
	}
	if u.User != nil {
		return bad("user info in the URL")
	}
	if strings.ContainsAny(u.Host, "%\\") {
		return bad("an escape or backslash in the host")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return bad("no host")
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || (n.Scheme == "http" && port == "80") || (n.Scheme == "https" && port == "443") {
		n.Host = host
	} else {
		n.Host = host + ":" + port
	}
	raw := u.EscapedPath()
	if raw == "" {
		raw = "/"
	}
	if raw[0] != '/' {
		return bad("a relative path")
	}
	var segs []string // decoded
	parts := strings.Split(raw[1:], "/")
	for i, p := range parts {
		d, err := url.PathUnescape(p)
		if err != nil {
			return bad("a bad percent escape in the path")
		}
		for j := 0; j < len(d); j++ {
			if c := d[j]; c == '/' || c == '\\' || c < 0x20 || c == 0x7f {
				return bad(fmt.Sprintf("an encoded slash, backslash or control byte in the path segment %q", p))
			}
		}
		last := i == len(parts)-1
		switch {
		case d == ".":
			if last {
				segs = append(segs, "")
			}
		case d == "..":
			if len(segs) == 0 {
				return bad("the path climbs above the root")
			}
			segs = segs[:len(segs)-1]
			if last {
				segs = append(segs, "")
			}
		case d != "" && strings.Trim(d, ". ") == "":
			return bad(fmt.Sprintf("the path segment %q is made of dots and spaces", p))
		default:
			segs = append(segs, d)
		}
	}
	esc := make([]string, len(segs))
	for i, d := range segs {
		esc[i] = url.PathEscape(d)
	}
	n.Path = "/" + strings.Join(segs, "/")
	n.RawPath = "/" + strings.Join(esc, "/")
	if n.RawPath == n.Path {
		n.RawPath = ""
	}
	n.Fragment, n.RawFragment = "", ""
	return &n, nil
}

// Allowed reports whether u is under one of the prefixes: once both are
// normalised (Normalize), the same scheme, host and port, and a path at or
// below the prefix's path. A URL or prefix that cannot be normalised is
// never allowed.
func Allowed(u *url.URL, prefixes []string) bool {
	n, err := Normalize(u)
	if err != nil {
		return false
	}
	up := n.EscapedPath()
	for _, p := range prefixes {
		pu, err := url.Parse(p)
		if err != nil {
			continue
		}
		if pu, err = Normalize(pu); err != nil || pu.Scheme != n.Scheme || pu.Host != n.Host {
			continue
		}
		pp := pu.EscapedPath()
		if pp == "/" || up == pp || strings.HasPrefix(up, strings.TrimSuffix(pp, "/")+"/") {
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
	if err != nil || (!strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https")) || u.Host == "" {
		return nil, fmt.Errorf("bad arguments: url %q is not an absolute http or https URL", args.URL)
	}
	// The request goes to the normalised URL: the server sees exactly the
	// path the allowlist was compared with, with no dot segment to resolve.
	if u, err = Normalize(u); err != nil {
		return nil, fmt.Errorf("url %q: %w; it is refused", args.URL, err)
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
		n, err := Normalize(r.URL)
		if err != nil {
			return fmt.Errorf("redirect to %s: %w", r.URL.Redacted(), err)
		}
		if !Allowed(n, allow) {
			return fmt.Errorf("redirect to %s, outside the http_allowlist", r.URL.Redacted())
		}
		r.URL = n
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
