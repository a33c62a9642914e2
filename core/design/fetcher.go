package design

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/backoff"
)

// Defaults of Options.
const (
	DefaultTimeout     = 5 * time.Second
	DefaultRetries     = 3
	DefaultBackoffBase = 200 * time.Millisecond
	maxBackoff         = 5 * time.Second
)

// namePattern is the schema's name pattern; a name is checked before it is
// put in a URL or a cache path.
var namePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`) })

// ValidName reports whether name is a well-formed template name.
func ValidName(name string) bool { return namePattern().MatchString(name) }

// Options configure a Fetcher. Only URL is required.
type Options struct {
	// URL is the design layer's root; templates are at {URL}/templates/{name}.
	URL string
	// CacheDir holds the last good copy of every fetched template
	// (DATA/templates-cache). Empty disables the cache, and with it the
	// degraded boot.
	CacheDir string
	// Timeout bounds one attempt, from dialling to the last body byte.
	// Default 5s.
	Timeout time.Duration
	// Retries is the number of attempts after the first one for a
	// transient failure (timeout, refused connection, 408, 425, 429, 5xx).
	// 0 means the default, 3; a negative value means no retry.
	Retries int
	// BackoffBase is the wait before the first retry; it doubles for each
	// further retry (capped at 5s), with ±20% jitter (core/backoff) so that a fleet that
	// lost its design layer at once does not retry in step. Default 200ms.
	BackoffBase time.Duration
	// TrustedKeys, when not empty, makes signatures mandatory: a template
	// is accepted from the design layer or the cache only with an ed25519
	// signature by one of these keys over its exact bytes.
	TrustedKeys []ed25519.PublicKey
	// AllowUnsignedCommands lets a template from the design layer name
	// mcp_servers commands without TrustedKeys (each such template is
	// logged as a warning). By default it is refused (ErrUnsignedCommands):
	// whoever controls the design layer's answers, over plain http:// too,
	// would otherwise run commands on the device.
	AllowUnsignedCommands bool
	// Validator checks every template received or read from the cache.
	Validator Validator
	// Logger receives the degraded-boot warning and debug lines per
	// attempt. The zero Logger discards.
	Logger zerolog.Logger
	// HTTPClient makes the requests; nil means a client with the default
	// transport. Its own Timeout, if any, applies on top of Timeout.
	HTTPClient *http.Client
	// Now is the clock, for fetched_at and the age in the warning; nil
	// means time.Now.
	Now func() time.Time
}

// Fetcher gets templates from a remote design layer and keeps the last good
// copy of each in a cache, which it boots from when the design layer cannot
// be used. It is safe for concurrent use; processes sharing a cache
// directory are safe too (every write is an atomic rename).
type Fetcher struct {
	o    Options
	base string // URL without a trailing slash
}

// NewFetcher checks o and fills in its defaults.
func NewFetcher(o Options) (*Fetcher, error) {
	u, err := url.Parse(o.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("design: design layer URL %q: want http:// or https://HOST[:PORT][/PATH]", o.URL)
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Retries < 0 {
		o.Retries = 0
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = DefaultBackoffBase
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Fetcher{o: o, base: strings.TrimRight(o.URL, "/")}, nil
}

// URL returns the address of a template on the design layer.
func (f *Fetcher) URL(name string) string { return f.base + "/templates/" + url.PathEscape(name) }

// CachePath returns where the template's cached copy lives, "" without a
// cache.
func (f *Fetcher) CachePath(name string) string {
	if f.o.CacheDir == "" {
		return ""
	}
	p, _ := cachePaths(f.o.CacheDir, name)
	return p
}

// Get returns the template called name.
//
//   - 200: the body is validated (schema and rules, its name must be name)
//     and, with TrustedKeys, its signature verified; then it is cached and
//     returned with Source "remote".
//   - 304 (the cached ETag still matches): the cached copy, re-checked,
//     with Source "remote" and its fetched_at renewed.
//   - 404 or 410 whose JSON body has code "template_not_found" (what
//     `openstarry design serve` sends): the design layer says the template
//     does not exist. Get returns an error wrapping ErrNotFound, does NOT
//     boot the cached copy, and deletes it: withdrawing a template from the
//     design layer is how an operator stops a fleet from running it.
//   - anything else (timeout, refused connection, TLS failure, 5xx, other
//     4xx, a 404 from something that is not a design layer, an invalid
//     template, a bad signature): after the retries a transient failure
//     earns, the cached copy is re-checked and returned with Source "cache",
//     and one warning line names the template, the cached version, its age
//     and the reason. With no usable cached copy the error wraps
//     ErrUnavailable and names the URL and the cache path.
//
// A cancelled ctx returns ctx's error, without falling back.
func (f *Fetcher) Get(ctx context.Context, name string) (*Resolved, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("design: %q is not a template name (want %s): %w", name, namePattern(), ErrInvalidTemplate)
	}
	u := f.URL(name)

	var cached *cacheEntry
	cacheErr := errNoCache
	if f.o.CacheDir != "" {
		cached, cacheErr = readCache(f.o.CacheDir, name, f.o.Validator, f.o.TrustedKeys)
		if cached != nil {
			if err := f.checkCommands(cached.t, cached.path); err != nil {
				cached, cacheErr = nil, fmt.Errorf("%w: %w", ErrCacheInvalid, err)
			}
		}
	}
	etag := ""
	if cached != nil {
		etag = cached.meta.ETag
	}

	resp, err := f.fetch(ctx, u, etag)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("design: get template %s: %w", name, ctx.Err())
	}
	if err == nil {
		switch resp.status {
		case http.StatusOK:
			var r *Resolved
			if r, err = f.accept(name, u, resp); err == nil {
				if cacheErr != nil && !errors.Is(cacheErr, errNoCache) {
					f.o.Logger.Warn().Str("template", name).AnErr("refused", cacheErr).
						Msg("cached template refused; replaced by the design layer's copy")
				}
				return r, nil
			}
		case http.StatusNotModified:
			if cached != nil {
				return f.confirmed(cached), nil
			}
			err = &fetchError{reason: "unexpected 304 Not Modified", err: errors.New("the design layer answered 304 to a request without If-None-Match")}
		}
	}

	if errors.Is(err, ErrNotFound) {
		if f.o.CacheDir != "" {
			if rerr := removeCache(f.o.CacheDir, name); rerr != nil {
				return nil, fmt.Errorf("%w (and removing the cached copy failed: %v)", err, rerr)
			}
		}
		return nil, err
	}
	if cached == nil {
		if f.o.CacheDir == "" {
			return nil, fmt.Errorf("design: template %s: %w: design layer %s: %w; no cache directory configured", name, ErrUnavailable, u, err)
		}
		return nil, fmt.Errorf("design: template %s: %w: design layer %s: %w; cache %s: %w", name, ErrUnavailable, u, err, f.CachePath(name), cacheErr)
	}
	r := f.fromCache(cached, SourceCache)
	r.Degraded = f.warnDegraded(name, u, cached, err)
	return r, nil
}

// accept checks a 200 answer and caches it.
func (f *Fetcher) accept(name, u string, resp *response) (*Resolved, error) {
	t, err := f.o.Validator.Validate(u, resp.body)
	if err != nil {
		return nil, &fetchError{reason: "invalid template", err: err}
	}
	if t.Name != name {
		return nil, &fetchError{reason: "invalid template", err: ValidationErrors{{File: u, Path: "/name", Rule: RuleNameMatch,
			Message: fmt.Sprintf("got template %q, asked for %q", t.Name, name)}}}
	}
	if len(f.o.TrustedKeys) > 0 {
		if err := Verify(f.o.TrustedKeys, resp.body, resp.signature); err != nil {
			return nil, &fetchError{reason: "bad signature", err: err}
		}
	}
	if err := f.checkCommands(t, u); err != nil {
		return nil, &fetchError{reason: "unsigned template starts commands", err: err}
	}
	now := f.o.Now()
	r := &Resolved{Template: t, Raw: resp.body, Digest: Digest(resp.body), Source: SourceRemote,
		Version: t.Version, FetchedAt: now, Signature: resp.signature, Location: u}
	if f.o.CacheDir != "" {
		m := cacheMeta{Name: name, Version: t.Version, Digest: r.Digest, ETag: resp.etag,
			Signature: resp.signature, FetchedAt: now.UTC(), URL: u}
		if err := writeCache(f.o.CacheDir, name, resp.body, m); err != nil {
			// The template is good; only the next degraded boot loses.
			f.o.Logger.Warn().Err(err).Str("template", name).Msg("could not cache the template; a boot without the design layer will not find it")
		}
	}
	return r, nil
}

// checkCommands refuses, without TrustedKeys, a template whose
// mcp_servers name commands, unless AllowUnsignedCommands (then it warns).
func (f *Fetcher) checkCommands(t *Template, where string) error {
	if len(f.o.TrustedKeys) > 0 {
		return nil
	}
	var cmds []string
	for _, s := range t.MCPServers {
		if len(s.Command) > 0 {
			cmds = append(cmds, fmt.Sprintf("%s: %q", s.Name, s.Command))
		}
	}
	if len(cmds) == 0 {
		return nil
	}
	if f.o.AllowUnsignedCommands {
		f.o.Logger.Warn().Str("template", t.Name).Str("from", where).Strs("commands", cmds).
			Msg("UNSIGNED template from the design layer runs commands on this device (design.allow_unsigned_commands is set; set design.trusted_keys instead)")
		return nil
	}
	return fmt.Errorf("%w: template %s from %s names mcp_servers commands (%s) and no design.trusted_keys verify it: sign it (openstarry templates sign) and set design.trusted_keys, or, knowingly, design.allow_unsigned_commands: true",
		ErrUnsignedCommands, t.Name, where, strings.Join(cmds, "; "))
}

// confirmed renews a cached entry the design layer answered 304 for.
func (f *Fetcher) confirmed(c *cacheEntry) *Resolved {
	c.meta.FetchedAt = f.o.Now().UTC()
	_, metaPath := cachePaths(f.o.CacheDir, c.meta.Name)
	if err := writeMeta(metaPath, c.meta); err != nil {
		f.o.Logger.Warn().Err(err).Str("template", c.meta.Name).Msg("could not renew fetched_at of the cached template")
	}
	r := f.fromCache(c, SourceRemote)
	r.Location = f.URL(c.meta.Name)
	return r
}

func (f *Fetcher) fromCache(c *cacheEntry, source string) *Resolved {
	return &Resolved{Template: c.t, Raw: c.raw, Digest: c.meta.Digest, Source: source, Version: c.t.Version,
		FetchedAt: c.meta.FetchedAt, Signature: c.meta.Signature, Location: c.path}
}

// warnDegraded logs the one line of a degraded boot and returns its
// message (Resolved.Degraded).
func (f *Fetcher) warnDegraded(name, u string, c *cacheEntry, cause error) string {
	reason := cause.Error()
	var fe *fetchError
	if errors.As(cause, &fe) {
		reason = fe.reason
	}
	what := "unreachable"
	if fe != nil && (fe.reason == "invalid template" || fe.reason == "bad signature") {
		what = "answer refused"
	}
	msg := fmt.Sprintf("design layer %s: booting cached template %s %s %s: %s", what, name, c.t.Version, f.age(c.meta.FetchedAt), reason)
	f.o.Logger.Warn().
		Str("template", name).
		Str("version", c.t.Version).
		Time("fetched_at", c.meta.FetchedAt).
		Str("url", u).
		Str("cache", c.path).
		Str("reason", reason).
		Str("error", strings.ReplaceAll(cause.Error(), "\n", "; ")).
		Msg(msg)
	return msg
}

// age says how old a cached copy is, in words that survive a board whose
// clock is not set yet.
func (f *Fetcher) age(at time.Time) string {
	if at.IsZero() {
		return "fetched at an unknown time"
	}
	d := f.o.Now().Sub(at)
	if d < 0 {
		return "fetched at " + at.UTC().Format(time.RFC3339) + " (the clock is behind)"
	}
	return "fetched " + HumanAge(d) + " ago"
}

// HumanAge formats d as "45s", "12m5s", "3h12m" or "4d2h".
func HumanAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	default:
		return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
	}
}

// response is a design-layer answer Get acts on.
type response struct {
	status    int
	body      []byte
	etag      string
	signature string
}

// fetchError is a failed attempt: reason is the short form for the warning
// line ("connection refused", "timeout after 5s", "HTTP 503", ...).
type fetchError struct {
	reason string
	err    error
}

func (e *fetchError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// fetch makes up to 1+Retries attempts, waiting between transient failures.
func (f *Fetcher) fetch(ctx context.Context, u, etag string) (*response, error) {
	var last error
	for i := 0; i <= f.o.Retries; i++ {
		if i > 0 {
			wait := f.backoff(i - 1)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		resp, err, retry := f.attempt(ctx, u, etag)
		if err == nil {
			return resp, nil
		}
		last = err
		f.o.Logger.Debug().Err(err).Str("url", u).Int("attempt", i+1).Int("attempts", f.o.Retries+1).
			Bool("retry", retry && i < f.o.Retries).Msg("design layer request failed")
		if !retry || ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// backoff returns the wait before retry n (0-based): BackoffBase·2ⁿ,
// capped at 5s, with core/backoff's jitter.
func (f *Fetcher) backoff(n int) time.Duration {
	return backoff.Policy{Initial: f.o.BackoffBase, Max: maxBackoff}.Delay(n)
}

// attempt makes one request. retry says whether a failure is transient.
func (f *Fetcher) attempt(ctx context.Context, u, etag string) (_ *response, _ error, retry bool) {
	actx, cancel := context.WithTimeout(ctx, f.o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodGet, u, nil)
	if err != nil {
		return nil, &fetchError{reason: "bad request", err: err}, false
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "openstarry-edge")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	res, err := f.o.HTTPClient.Do(req)
	if err != nil {
		return nil, &fetchError{reason: f.classify(err), err: err}, true
	}
	defer func() {
		io.Copy(io.Discard, io.LimitReader(res.Body, 64<<10))
		res.Body.Close()
	}()

	switch st := res.StatusCode; {
	case st == http.StatusOK:
		body, err := readAllLimit(res.Body, MaxTemplateBytes)
		if err != nil {
			if !errors.Is(err, errTooLarge) {
				return nil, &fetchError{reason: f.classify(err), err: fmt.Errorf("reading the body: %w", err)}, true
			}
			return nil, &fetchError{reason: "invalid template", err: err}, false
		}
		return &response{status: st, body: body, etag: res.Header.Get("ETag"), signature: res.Header.Get(SignatureHeader)}, nil, false
	case st == http.StatusNotModified:
		return &response{status: st}, nil, false
	case st == http.StatusNotFound || st == http.StatusGone:
		if isTemplateNotFound(res) {
			return nil, fmt.Errorf("design: template %s not found on design layer %s: %w", lastSegment(u), f.base, ErrNotFound), false
		}
		return nil, &fetchError{reason: fmt.Sprintf("HTTP %d from something that is not a design layer", st), err: errors.New(res.Status)}, false
	case st == http.StatusRequestTimeout || st == http.StatusTooEarly || st == http.StatusTooManyRequests || st >= 500:
		return nil, &fetchError{reason: fmt.Sprintf("HTTP %d", st), err: errors.New(res.Status + errorBody(res))}, true
	default:
		return nil, &fetchError{reason: fmt.Sprintf("HTTP %d", st), err: errors.New(res.Status + errorBody(res))}, false
	}
}

// classify names a transport failure for the warning line.
func (f *Fetcher) classify(err error) string {
	var ne net.Error
	var dns *net.DNSError
	var cert *tls.CertificateVerificationError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("timeout after %s", f.o.Timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &dns):
		return "DNS lookup failed"
	case errors.As(err, &cert):
		return "TLS certificate not accepted"
	case errors.Is(err, syscall.ENETUNREACH), errors.Is(err, syscall.EHOSTUNREACH):
		return "network unreachable"
	default:
		return "network error"
	}
}

// isTemplateNotFound reads a JSON error body and reports whether it is the
// design layer's own "template_not_found".
func isTemplateNotFound(res *http.Response) bool {
	data, err := readAllLimit(res.Body, 64<<10)
	if err != nil {
		return false
	}
	var e struct {
		Code string `json:"code"`
	}
	return json.Unmarshal(data, &e) == nil && e.Code == CodeTemplateNotFound
}

// errorBody returns ": message" from a JSON error body, or "".
func errorBody(res *http.Response) string {
	data, err := readAllLimit(res.Body, 64<<10)
	if err != nil {
		return ""
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(data, &e) == nil && e.Error != "" {
		return ": " + e.Error
	}
	return ""
}

func lastSegment(u string) string {
	if i := strings.LastIndexByte(u, '/'); i >= 0 {
		return u[i+1:]
	}
	return u
}
