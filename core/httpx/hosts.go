package httpx

import (
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// CodeBadHost answers a request whose Host header names no host the
// listener serves (see AllowHosts).
const CodeBadHost = "bad_host"

// HostAllowed reports whether host, a Host header with or without a port,
// is one a listener of this machine serves: an IP address (a browser that
// connects to an address sends it as the Host, so its origin is that
// address), "localhost" or a name under ".localhost", this machine's host
// name, or one of names (exact, case-insensitive; "*.example.com" for the
// names under example.com). An empty Host (HTTP/1.0) is allowed.
func HostAllowed(host string, names []string) bool {
	if host == "" {
		return true
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "" {
		return false
	}
	if net.ParseIP(h) != nil {
		return true
	}
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if me, err := os.Hostname(); err == nil && me != "" && strings.EqualFold(h, strings.TrimSuffix(me, ".")) {
		return true
	}
	for _, n := range names {
		n = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(n)), ".")
		if n == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(n, "*."); ok {
			if strings.HasSuffix(h, "."+rest) {
				return true
			}
		} else if h == n {
			return true
		}
	}
	return false
}

// AllowHosts refuses, with 403 bad_host, a request whose Host header is not
// allowed by HostAllowed(names). It is what stops DNS rebinding: a web page
// whose own name the attacker points at 127.0.0.1 reaches a loopback
// listener with the attacker's name as its Host, and the page's requests
// are same-origin to the browser, so neither CORS nor Sec-Fetch-Site stop
// them; the Host does.
func AllowHosts(names []string, next http.Handler) http.Handler {
	names = append([]string(nil), names...)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !HostAllowed(r.Host, names) {
			w.Header().Set("Connection", "close")
			Error(w, http.StatusForbidden, CodeBadHost, "Host "+strconv.Quote(r.Host)+
				" is not a name this listener serves (loopback names and addresses, this machine's name, http.hosts); "+
				"add it to http.hosts (OPENSTARRY_HTTP_HOSTS) to reach the API under that name")
			return
		}
		next.ServeHTTP(w, r)
	})
}
