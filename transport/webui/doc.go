// Package webui is the device's web UI: a small single-page application
// (plain HTML, CSS and JavaScript embedded in the binary, no framework, no
// CDN, no external font) that the daemon's HTTP listener serves at /, and
// the browser login that lets it use the HTTP API from off loopback.
//
// # What it serves
//
//	GET  /               the page (index.html)
//	GET  /ui/{asset}     its script, style sheet and icon
//	GET  /ui/session     whether the caller may use the API, and its CSRF token
//	POST /ui/login       {"token", "name"}: a browser session for the HTTP token
//	POST /ui/logout      ends it
//
// Everything else goes to the API handler that UI.Wrap wraps.
//
// # Invariants
//
//   - Assets are gzipped once at start and served with a strong ETag
//     (Cache-Control no-cache for the page, a year and immutable for the
//     assets, whose URLs carry their hash), so a board sends each byte once.
//   - The API's rule is kept: loopback needs nothing, anyone else the HTTP
//     token. A browser presents the token once at /ui/login and gets a
//     session cookie (HttpOnly, SameSite=Strict, Secure over TLS) that
//     stands for the token until it expires or the daemon restarts.
//     Sessions live in memory only.
//   - Every state-changing request made with that cookie carries the
//     session's CSRF token in X-CSRF-Token, or is refused with 403; every
//     state-changing request from a browser of another origin (by
//     Sec-Fetch-Site or Origin) is refused with 403, loopback included.
//   - Failed logins are limited per client address; the token is compared
//     in constant time and never logged.
//   - Every error is the API's one-line JSON {"error", "code"}.
package webui
