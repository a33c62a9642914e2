package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
}

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
	verified, err := PublishChecked(ctx, pc, topic, task, o.Username, o.Timeout)
	if err != nil {
		return nil, err
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
