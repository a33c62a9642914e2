package httpx

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestTokenLockout: off loopback, MaxTokenFailures wrong or missing tokens
// from one address lock it out (429, Retry-After), the right token
// included, while another address and loopback are served; the lockout
// ends with its window.
func TestTokenLockout(t *testing.T) {
	const token = "right-token-0123456789"
	h := TokenOffLoopback(token, nil, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	do := func(remote, auth string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/status", nil)
		r.RemoteAddr = remote
		if auth != "" {
			r.Header.Set("Authorization", "Bearer "+auth)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for i := range MaxTokenFailures {
		auth := "guess"
		if i%2 == 1 {
			auth = ""
		}
		if w := do("10.0.0.2:4000", auth); w.Code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d %s", i, w.Code, w.Body)
		}
	}
	w := do("10.0.0.2:4001", token)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), `"code":"too_many_failures"`) || w.Header().Get("Retry-After") == "" {
		t.Fatalf("the right token after %d wrong ones: %d %s", MaxTokenFailures, w.Code, w.Body)
	}
	if w := do("10.0.0.3:4000", token); w.Code != http.StatusNoContent {
		t.Fatalf("another address: %d", w.Code)
	}
	if w := do("127.0.0.1:4000", ""); w.Code != http.StatusNoContent {
		t.Fatalf("loopback: %d", w.Code)
	}

	// The window: a failures counter with a clock of the test's.
	now := time.Unix(1_800_000_000, 0)
	f := newFailures()
	f.now = func() time.Time { return now }
	for range MaxTokenFailures {
		f.fail("10.0.0.2")
	}
	if f.lockedOut("10.0.0.2") <= 0 {
		t.Fatal("not locked out")
	}
	now = now.Add(TokenFailureWindow)
	if left := f.lockedOut("10.0.0.2"); left != 0 {
		t.Fatalf("still locked out after the window: %s", left)
	}
	for i := range maxFailureAddrs + 10 {
		f.fail("10.1." + string(rune('a'+i%26)) + "." + time.Duration(i).String())
	}
	if len(f.m) > maxFailureAddrs {
		t.Fatalf("%d addresses remembered", len(f.m))
	}
}
