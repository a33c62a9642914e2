package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/httpx"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// The fleet view of the web UI, served on the daemon's HTTP listener:
//
//	GET  /fleet         the devices on the hub, from their retained status
//	                    and telemetry: {"hub", "devices": [DeviceView]}
//	POST /fleet/tasks   publish a task (the task JSON) on the fleet topic:
//	                    202 {"task_id", "status": "published", "topic"};
//	                    then, in the background, publish it again every
//	                    Republish while no device has claimed it
//
// Both use the daemon's hub connection settings (mqtt.broker and its
// credentials: the hub's ACL decides what they may read and publish).
// Without a hub (the embedded broker) they answer 404 no_hub.

// WebOptions configure the fleet view.
type WebOptions struct {
	Dial   mqtt.DialOptions // the hub; Broker "" means there is none
	Prefix string           // topic prefix; default mqtt.DefaultTopicPrefix
	// Token is http.token: required from off loopback, as on the API.
	Token string
	Log   zerolog.Logger
	// Collect is how long a view reads the retained messages; default
	// 700ms. Fresh is how long a view is served again; default 2s.
	Collect, Fresh time.Duration
	// Republish is how long a fleet task published here may go unclaimed
	// before it is published again (a device that is down keeps its share
	// of the fleet topic); default mqtt.DefaultRepublish. RepublishFor is
	// how long the daemon keeps trying, the task's deadline permitting;
	// default DefaultRepublishFor.
	Republish, RepublishFor time.Duration
}

// DefaultRepublishFor is how long the fleet view publishes an unclaimed
// fleet task again.
const DefaultRepublishFor = 10 * time.Minute

// MaxWatched bounds the fleet tasks the view watches at once (each on a
// hub connection of its own): beyond, a task is published once, logged.
const MaxWatched = 64

// Web serves GET /fleet and POST /fleet/tasks, and passes every other
// request to next.
func Web(o WebOptions, next http.Handler) http.Handler {
	if o.Prefix == "" {
		o.Prefix = mqtt.DefaultTopicPrefix
	}
	if o.Collect <= 0 {
		o.Collect = 700 * time.Millisecond
	}
	if o.Fresh <= 0 {
		o.Fresh = 2 * time.Second
	}
	if o.Dial.Timeout <= 0 {
		o.Dial.Timeout = 10 * time.Second
	}
	if o.Republish <= 0 {
		o.Republish = mqtt.DefaultRepublish
	}
	if o.RepublishFor <= 0 {
		o.RepublishFor = DefaultRepublishFor
	}
	v := &webView{o: o, watched: make(chan struct{}, MaxWatched)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fleet", v.devices)
	mux.HandleFunc("POST /fleet/tasks", v.task)
	mine := httpx.TokenOffLoopback(o.Token, func(remote, path string) {
		o.Log.Warn().Str("remote", remote).Str("path", path).Msg("http: missing or wrong token")
	}, httpx.Routes(mux))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fleet" || r.URL.Path == "/fleet/tasks" {
			mine.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

type webView struct {
	o       WebOptions
	watched chan struct{} // a token per fleet task watched until claimed

	mu   sync.Mutex // one collection at a time; guards the fields below
	at   time.Time
	last []DeviceView
}

// hub is the hub's URL without its password.
func (v *webView) hub() string {
	if u, err := url.Parse(v.o.Dial.Broker); err == nil && u.User != nil {
		return u.Redacted()
	}
	return v.o.Dial.Broker
}

func (v *webView) noHub(w http.ResponseWriter) bool {
	if v.o.Dial.Broker != "" {
		return false
	}
	httpx.Error(w, http.StatusNotFound, "no_hub",
		"this daemon has no hub (mqtt.broker is empty: it runs the embedded broker); the fleet view reads the devices from a hub")
	return true
}

func (v *webView) devices(w http.ResponseWriter, r *http.Request) {
	if v.noHub(w) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.last == nil || time.Since(v.at) > v.o.Fresh {
		views, err := CollectStatus(r.Context(), v.o.Dial, v.o.Prefix, v.o.Collect)
		if err != nil {
			v.o.Log.Warn().Err(err).Str("hub", v.hub()).Msg("fleet view: the hub could not be read")
			httpx.Error(w, http.StatusBadGateway, "hub_unreachable", fmt.Sprintf("reading the fleet from the hub %s: %v", v.hub(), err))
			return
		}
		v.last, v.at = views, time.Now()
	}
	httpx.JSON(w, http.StatusOK, map[string]any{"hub": v.hub(), "devices": v.last, "time": v.at.UTC()})
}

func (v *webView) task(w http.ResponseWriter, r *http.Request) {
	if v.noHub(w) {
		return
	}
	body, err := httpx.ReadBody(w, r, 256<<10)
	if errors.Is(err, httpx.ErrTooLarge) {
		httpx.Error(w, http.StatusBadRequest, agent.CodeTooLarge, "task is over the limit of 256 KiB")
		return
	}
	if err != nil {
		httpx.Error(w, http.StatusBadRequest, httpx.CodeBadBody, "reading the body: "+err.Error())
		return
	}
	t, err := agent.DecodeTask(body, 256<<10)
	if err != nil {
		code := agent.CodeBadJSON
		var te *agent.TaskError
		if errors.As(err, &te) {
			code = te.Code
		}
		httpx.Error(w, http.StatusBadRequest, code, err.Error())
		return
	}
	// The task is published, then watched until a device claims it, by a
	// goroutine that outlives the request: the answer comes once the
	// first copy is published.
	ctx, cancel := context.WithTimeout(context.Background(), v.o.RepublishFor)
	published, ended := make(chan struct{}), make(chan error, 1)
	var once sync.Once
	d := v.o.Dial
	log := v.o.Log.With().Str("task", t.TaskID).Logger()
	republish := v.o.Republish
	select {
	case v.watched <- struct{}{}:
	default:
		republish = -1
		log.Warn().Int("max", MaxWatched).Msg("fleet view: too many fleet tasks unclaimed at once; this one is published once, not again")
	}
	go func() {
		defer cancel()
		if republish > 0 {
			defer func() { <-v.watched }()
		}
		_, err := mqtt.SendTask(ctx, mqtt.SendOptions{Broker: d.Broker, Username: d.Username, Password: d.Password,
			CAFile: d.CAFile, CertFile: d.CertFile, KeyFile: d.KeyFile, TopicPrefix: v.o.Prefix, Fleet: true,
			Timeout: v.o.RepublishFor, Republish: republish,
			Published: func() { once.Do(func() { close(published) }) },
			Notice:    func(msg string) { log.Warn().Msg("fleet view: " + msg) }}, body)
		select {
		case <-published:
			if err != nil {
				log.Warn().Err(err).Msg("fleet view: the fleet task was published, then not again")
			}
		default:
		}
		ended <- err
	}()
	// Connecting is bounded by Dial.Timeout, and the check that the hub
	// took the publication by 10 s.
	limit := time.NewTimer(v.o.Dial.Timeout + 10*time.Second)
	defer limit.Stop()
	select {
	case <-published:
	case err = <-ended: // nil: published, and claimed already
	case <-limit.C:
		cancel()
		err = fmt.Errorf("no answer within %s", v.o.Dial.Timeout+10*time.Second)
	case <-r.Context().Done():
		cancel()
		err = r.Context().Err()
	}
	if err != nil {
		v.o.Log.Warn().Err(err).Str("task", t.TaskID).Msg("fleet view: task not published")
		httpx.Error(w, http.StatusBadGateway, "hub_unreachable", fmt.Sprintf("publishing to the hub %s: %v", v.hub(), err))
		return
	}
	v.o.Log.Info().Str("task", t.TaskID).Str("hub", v.hub()).Msg("fleet view: task published to the fleet")
	httpx.JSON(w, http.StatusAccepted, map[string]string{"task_id": t.TaskID, "status": "published", "topic": v.o.Prefix + "/fleet/tasks"})
}
