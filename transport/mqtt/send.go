package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/eclipse/paho.mqtt.golang/packets"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// SendOptions say where and how SendTask publishes.
type SendOptions struct {
	Broker                    string
	Username, Password        string
	CAFile, CertFile, KeyFile string
	TopicPrefix               string // default "openstarry"
	Device                    string
	Agent                     string // the agent's task topic; empty with Fleet
	Fleet                     bool   // publish to the fleet topic instead
	// Wait subscribes to the results first and returns the result of the
	// task, or an error after Timeout.
	Wait    bool
	Timeout time.Duration // default 30s; bounds connecting too
	// Republish, with Fleet: while no device has claimed the task (its
	// retained claim on FleetClaimTopic), publish it again every Republish
	// until one does, its deadline passes or Timeout ends. A device that
	// is down keeps its share of the fleet topic (its persistent session
	// stays in the group): the copy the hub queued for it waits there, and
	// the next copy goes to the next device of the group. 0 means
	// DefaultRepublish; a negative value publishes once. Without Wait,
	// SendTask returns once the task is claimed, or at Timeout.
	Republish time.Duration
	// Published, if set, is called once the task was first published.
	Published func()
	// Notice, if set, is told what the caller should know that is not an
	// error: the task not claimed yet at Timeout, the copies published.
	Notice func(msg string)
}

// DefaultRepublish is how long a fleet task may go unclaimed before its
// sender publishes it again.
const DefaultRepublish = 10 * time.Second

// FleetClaimTopic is where the claim of a fleet task is retained
// (transport/fleet claims it there).
func FleetClaimTopic(prefix, taskID string) string { return prefix + "/fleet/claims/" + taskID }

// ErrNoResult is returned by SendTask when no result came within the
// timeout.
var ErrNoResult = errors.New("no result within the timeout")

// SendTask publishes one task (QoS 1) and, with Wait, returns its result
// JSON. The task must carry a task_id.
func SendTask(ctx context.Context, o SendOptions, task []byte) (json.RawMessage, error) {
	if o.Timeout <= 0 {
		o.Timeout = 30 * time.Second
	}
	if o.TopicPrefix == "" {
		o.TopicPrefix = DefaultTopicPrefix
	}
	if err := ValidatePrefix(o.TopicPrefix); err != nil {
		return nil, err
	}
	t, err := agent.DecodeTask(task, 0)
	if err != nil {
		return nil, err
	}
	var topic, results string
	if o.Fleet {
		topic, results = FleetTopic(o.TopicPrefix), o.TopicPrefix+"/+/agents/+/results"
	} else {
		if err := agent.ValidateID(o.Device); err != nil {
			return nil, fmt.Errorf("device id: %w", err)
		}
		if err := agent.ValidateID(o.Agent); err != nil {
			return nil, fmt.Errorf("agent id: %w", err)
		}
		tp := TopicsFor(o.TopicPrefix, o.Device, o.Agent, DefaultFleetGroup)
		topic, results = tp.Tasks, tp.Results
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	pc, err := Dial(ctx, DialOptions{Broker: o.Broker, Username: o.Username, Password: o.Password,
		CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile, Timeout: o.Timeout})
	if err != nil {
		return nil, err
	}
	defer pc.Disconnect(100)

	got := make(chan json.RawMessage, 1)
	if o.Wait {
		handler := func(_ paho.Client, m paho.Message) {
			var r struct {
				TaskID string `json:"task_id"`
			}
			if json.Unmarshal(m.Payload(), &r) == nil && r.TaskID == t.TaskID {
				select {
				case got <- json.RawMessage(append([]byte(nil), m.Payload()...)):
				default:
				}
			}
		}
		if err := waitToken(ctx, pc.Subscribe(results, 1, handler), o.Timeout); err != nil {
			return nil, fmt.Errorf("mqtt: subscribe %s: %w", results, err)
		}
	}
	var claimed chan struct{}
	if o.Fleet && o.Republish >= 0 {
		if o.Republish == 0 {
			o.Republish = DefaultRepublish
		}
		ct := FleetClaimTopic(o.TopicPrefix, t.TaskID)
		if claimed, err = watchClaim(ctx, pc, ct, t.TaskID, o.Timeout); err != nil {
			return nil, err
		}
		if claimed == nil && o.Notice != nil {
			o.Notice(fmt.Sprintf("the hub refused the subscription to %s (%s may not read the claims): fleet task %s is published once, not again while unclaimed",
				ct, userName(o.Username), t.TaskID))
		}
	}
	verified, err := PublishReported(ctx, DialOptions{Broker: o.Broker, Username: o.Username, Password: o.Password,
		CAFile: o.CAFile, CertFile: o.CertFile, KeyFile: o.KeyFile}, pc, topic, task, o.Timeout)
	if err != nil {
		return nil, err
	}
	if o.Published != nil {
		o.Published()
	}
	if claimed != nil {
		copies, err := republish(ctx, pc, topic, task, t, o.Republish, claimed, got)
		if copies > 0 && o.Notice != nil {
			o.Notice(fmt.Sprintf("fleet task %s was not claimed within %s: published %d more time(s) (a device that is down keeps its share of the fleet topic)",
				t.TaskID, o.Republish, copies))
		}
		if err != nil {
			return nil, err
		}
		if !o.Wait {
			select {
			case <-claimed:
			default:
				if o.Notice != nil {
					o.Notice(fmt.Sprintf("fleet task %s published, not claimed by any device within %s; it waits at the hub for a device that returns", t.TaskID, o.Timeout))
				}
			}
			return nil, nil
		}
	}
	if !o.Wait {
		return nil, nil
	}
	select {
	case r := <-got:
		return r, nil
	case <-ctx.Done():
		hint := ""
		if !verified {
			hint = "; " + UnverifiedHint(topic, o.Username)
		}
		return nil, fmt.Errorf("task %s: %w (%s) on %s%s", t.TaskID, ErrNoResult, o.Timeout, results, hint)
	}
}

// watchClaim subscribes to a fleet task's claim topic: the channel is
// closed when a claim of it is there (retained before, or made after). It
// is nil when the hub refused the subscription.
func watchClaim(ctx context.Context, pc paho.Client, topic, taskID string, timeout time.Duration) (chan struct{}, error) {
	claimed := make(chan struct{})
	var once sync.Once
	tok := pc.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		var c struct {
			TaskID string `json:"task_id"`
			Device string `json:"device"`
		}
		if json.Unmarshal(m.Payload(), &c) == nil && c.TaskID == taskID && c.Device != "" {
			once.Do(func() { close(claimed) })
		}
	})
	if err := waitToken(ctx, tok, timeout); err != nil {
		return nil, fmt.Errorf("mqtt: subscribe %s: %w", topic, err)
	}
	if st, ok := tok.(*paho.SubscribeToken); ok && st.Result()[topic] > 2 {
		return nil, nil
	}
	return claimed, nil
}

// republish publishes a fleet task again every interval until it is
// claimed, its result came (got, with Wait), its deadline passed or ctx
// ended; it returns how many more copies it published.
func republish(ctx context.Context, pc paho.Client, topic string, task []byte, t *agent.Task, interval time.Duration,
	claimed <-chan struct{}, got chan json.RawMessage) (int, error) {
	var deadline <-chan time.Time
	if t.Deadline != "" {
		if d, err := time.Parse(time.RFC3339, t.Deadline); err == nil {
			dt := time.NewTimer(time.Until(d))
			defer dt.Stop()
			deadline = dt.C
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	copies := 0
	for {
		select {
		case <-claimed:
			return copies, nil
		case <-deadline:
			return copies, nil
		case <-ctx.Done():
			return copies, nil
		case r := <-got:
			select { // for the caller
			case got <- r:
			default:
			}
			return copies, nil
		case <-tick.C:
			if err := waitToken(ctx, pc.Publish(topic, 1, false, task), interval); err != nil {
				if ctx.Err() != nil {
					return copies, nil
				}
				return copies, fmt.Errorf("mqtt: publish to %s again: %w", topic, err)
			}
			copies++
		}
	}
}

// DialOptions say how a short-lived command-line client connects.
type DialOptions struct {
	Broker                    string
	Username, Password        string
	CAFile, CertFile, KeyFile string
	Timeout                   time.Duration // bounds connecting
}

// Dial connects a clean-session client with a random id, for the commands
// that publish something and wait for an answer. A refused login or a
// failed TLS handshake is an error that says what to check.
func Dial(ctx context.Context, o DialOptions) (paho.Client, error) {
	u, secure, err := ParseBrokerURL(o.Broker)
	if err != nil {
		return nil, err
	}
	tc, err := TLSConfig(u, secure, o.CAFile, o.CertFile, o.KeyFile)
	if err != nil {
		return nil, err
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	opts := paho.NewClientOptions().AddBroker(u.String()).
		SetClientID("openstarry-cli-" + hex.EncodeToString(id)).
		SetCleanSession(true).
		SetProtocolVersion(4).
		SetConnectTimeout(min(o.Timeout, DefaultConnectTimeout)).
		SetAutoReconnect(false)
	if o.Username != "" {
		opts.SetUsername(o.Username)
		opts.SetPassword(o.Password)
	}
	if tc != nil {
		opts.SetTLSConfig(tc)
	}
	opts.SetCustomOpenConnectionFn(Opener(tc))
	pc := paho.NewClient(opts)
	tok := pc.Connect()
	if err := waitToken(ctx, tok, o.Timeout); err != nil {
		var rc byte = packets.ErrNetworkError
		if ct, ok := tok.(*paho.ConnectToken); ok && done(tok) {
			rc = ct.ReturnCode()
		}
		if fatal := classify(rc, err); fatal != nil {
			return nil, connectError(u, fatal, err)
		}
		return nil, fmt.Errorf("mqtt: cannot connect to %s: %w", u.Redacted(), cause(err))
	}
	return pc, nil
}

// WaitToken waits for an MQTT operation within ctx and limit.
func WaitToken(ctx context.Context, tok paho.Token, limit time.Duration) error {
	return waitToken(ctx, tok, limit)
}
