package fleet

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// TestWebRoutes: without a hub the fleet view says so (404 no_hub); a task
// that is not one is refused before anything is published; other paths go
// to the API behind; off loopback the token is required.
func TestWebRoutes(t *testing.T) {
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	noHub := Web(WebOptions{Log: zerolog.Nop()}, next)
	withHub := Web(WebOptions{Dial: mqtt.DialOptions{Broker: "tcp://127.0.0.1:1"}, Token: "s3cret", Log: zerolog.Nop()}, next)
	for _, tc := range []struct {
		name       string
		h          http.Handler
		method     string
		path, body string
		remote     string
		status     int
		want       string
	}{
		{"no hub", noHub, "GET", "/fleet", "", "127.0.0.1:5", 404, `"code":"no_hub"`},
		{"no hub, task", noHub, "POST", "/fleet/tasks", `{"task_id":"f1"}`, "127.0.0.1:5", 404, `"code":"no_hub"`},
		{"other paths pass", noHub, "GET", "/status", "", "127.0.0.1:5", 299, ""},
		{"unknown field", withHub, "POST", "/fleet/tasks", `{"task_id":"f1","inptu":"x"}`, "127.0.0.1:5", 400, `task has an unknown field \"inptu\"`},
		{"no task id", withHub, "POST", "/fleet/tasks", `{"input":"x"}`, "127.0.0.1:5", 400, `"code":"missing_task_id"`},
		{"wrong method", withHub, "DELETE", "/fleet", "", "127.0.0.1:5", 405, `"code":"method_not_allowed"`},
		{"token off loopback", withHub, "GET", "/fleet", "", "192.0.2.7:5", 401, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			r.RemoteAddr = tc.remote
			w := httptest.NewRecorder()
			tc.h.ServeHTTP(w, r)
			if w.Code != tc.status || !strings.Contains(w.Body.String(), tc.want) {
				t.Fatalf("%d %s, want %d with %s", w.Code, w.Body.String(), tc.status, tc.want)
			}
		})
	}
}
