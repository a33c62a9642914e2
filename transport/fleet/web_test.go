package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
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

// TestWebFleetTaskDeadMember: the fleet group on a real Mosquitto holds a
// member that is gone (a persistent session whose connection was cut: the
// hub keeps queueing its share for it) and one that is alive and claims
// what it gets with Claims. Fleet tasks posted to /fleet/tasks are all
// claimed by the live member: the view publishes a task again while no
// device has claimed it. Before, the hub's copies for the dead member were
// all there was of them.
func TestWebFleetTaskDeadMember(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	shared := "$share/openstarry/" + mqtt.FleetTopic("openstarry")
	member := func(id string, handler paho.MessageHandler) paho.Client {
		pc := paho.NewClient(paho.NewClientOptions().AddBroker(m.URL()).SetClientID(id).SetCleanSession(false).
			SetProtocolVersion(4).SetAutoReconnect(false))
		if tok := pc.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("%s: %v", id, tok.Error())
		}
		if tok := pc.Subscribe(shared, 1, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("%s: %v", id, tok.Error())
		}
		return pc
	}
	// The dead member: its session stays in the group when it goes.
	member("dead-member", func(paho.Client, paho.Message) {}).Disconnect(0)

	claims, err := StartClaims(ClaimsConfig{Broker: m.URL(), Prefix: "openstarry", Device: "live", Log: zerolog.New(zerolog.NewTestWriter(t))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(claims.Close)
	var mu sync.Mutex
	won := map[string]int{}
	live := member("live-member", func(_ paho.Client, msg paho.Message) {
		var task struct {
			TaskID string `json:"task_id"`
		}
		_ = json.Unmarshal(msg.Payload(), &task)
		go func() {
			if _, mine, err := claims.Claim(context.Background(), task.TaskID); err == nil && mine {
				mu.Lock()
				won[task.TaskID]++
				mu.Unlock()
			}
		}()
	})
	t.Cleanup(func() { live.Disconnect(10) })

	h := Web(WebOptions{Dial: mqtt.DialOptions{Broker: m.URL()}, Republish: 300 * time.Millisecond, Log: zerolog.New(zerolog.NewTestWriter(t))},
		http.NotFoundHandler())
	const n = 6
	for i := range n {
		r := httptest.NewRequest("POST", "/fleet/tasks", strings.NewReader(fmt.Sprintf(`{"task_id":"w-%d","input":"x"}`, i)))
		r.RemoteAddr = "127.0.0.1:5"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusAccepted {
			t.Fatalf("POST /fleet/tasks: %d %s", w.Code, w.Body.String())
		}
	}
	wait.For(t, 60*time.Second, "the live member to claim every fleet task", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(won) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for id, k := range won {
		if k != 1 {
			t.Fatalf("task %s claimed %d times by the live member", id, k)
		}
	}
}
