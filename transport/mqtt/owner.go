package mqtt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// Who owns a device's status topic ({prefix}/{device}/status), in
// StatusMessage.Owner.
const (
	OwnerDaemon = "daemon" // openstarry start: the device's owner whenever it runs
	OwnerAgent  = "agent"  // openstarry run, an agent on its own
)

// Instance names one process that publishes a device's status: a new id
// at every start, and where it runs. A second daemon for a device id is
// told apart from a restart of the same one by it, and the refusal names
// the other one with it.
type Instance struct {
	ID      string    `json:"instance"`
	Host    string    `json:"host,omitempty"`
	PID     int       `json:"pid,omitempty"`
	Data    string    `json:"data,omitempty"`
	Started time.Time `json:"started,omitzero"`
}

// NewInstance returns this process's instance, with a new random id.
func NewInstance(data string) Instance {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	return Instance{ID: hex.EncodeToString(b), Host: host, PID: os.Getpid(), Data: data, Started: time.Now().UTC()}
}

// String names the instance for a person: host, pid, data directory.
func (i Instance) String() string {
	s := fmt.Sprintf("pid %d on host %s", i.PID, i.Host)
	if i.Data != "" {
		s += ", data " + i.Data
	}
	if !i.Started.IsZero() {
		s += ", started " + i.Started.UTC().Format(time.RFC3339)
	}
	return s
}

// ProbeTopic is where a daemon starting as a device asks whether another
// daemon runs as that device; the one that does answers on
// ProbeTopic + "/reply". Both lie under the device's own topics, which its
// ACL allows.
func ProbeTopic(prefix, device string) string { return prefix + "/" + device + "/daemon/probe" }

// probeMsg is a probe, and its reply (with the answering Instance).
type probeMsg struct {
	Nonce string `json:"nonce"`
	Instance
}

// ErrDeviceOnline is returned when another daemon already runs as this
// device id.
var ErrDeviceOnline = errors.New("another daemon is online as this device")

// DeviceOnlineError names the daemon that already runs as Device; it is
// ErrDeviceOnline.
type DeviceOnlineError struct {
	Device string
	Other  Instance
}

func (e *DeviceOnlineError) Error() string {
	return fmt.Sprintf("device id %q is already online on the hub: its daemon (%s) answered; give this daemon its own mqtt.device (--device, OPENSTARRY_DEVICE), or stop that one",
		e.Device, e.Other)
}

// Is makes errors.Is(err, ErrDeviceOnline) hold.
func (e *DeviceOnlineError) Is(target error) bool { return target == ErrDeviceOnline }

// ReadStatus returns the retained status of device on an open connection,
// nil when none is retained. It subscribes to the status topic, then to a
// second topic: a broker handles one client's packets in order, so the
// retained status, if any, was sent before the second acknowledgement.
func ReadStatus(ctx context.Context, pc paho.Client, prefix, device string, timeout time.Duration) (*StatusMessage, error) {
	got := make(chan []byte, 1)
	topic := StatusTopic(prefix, device)
	if err := waitToken(ctx, pc.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		select {
		case got <- append([]byte(nil), m.Payload()...):
		default:
		}
	}), timeout); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", topic, err)
	}
	if err := waitToken(ctx, pc.Subscribe(ProbeTopic(prefix, device)+"/reply/sync", 0, func(paho.Client, paho.Message) {}), timeout); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	select {
	case b := <-got:
		pc.Unsubscribe(topic)
		if len(b) == 0 {
			return nil, nil
		}
		var s StatusMessage
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, nil // not ours to judge: the owner replaces it
		}
		return &s, nil
	case <-time.After(250 * time.Millisecond): // the router hands it over after the acknowledgement
		pc.Unsubscribe(topic)
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CheckDevice is asked by a daemon before it connects as device (its
// client id, its status and will): it reads the device's retained status
// and, when another instance says it is online, asks that one to answer
// within timeout. An answer means that a daemon runs as this device now:
// ErrDeviceOnline, naming it. No answer means the status is stale (a
// daemon that died and whose last will the hub has not published yet): nil,
// and the caller takes the device over.
func CheckDevice(ctx context.Context, pc paho.Client, prefix, device string, self Instance, timeout time.Duration) (stale *StatusMessage, err error) {
	st, err := ReadStatus(ctx, pc, prefix, device, timeout)
	if err != nil || st == nil || st.State != "online" || st.Owner != OwnerDaemon || st.Instance == self.ID {
		return nil, err
	}
	nonce := NewInstance("").ID
	answer := make(chan Instance, 1)
	reply := ProbeTopic(prefix, device) + "/reply"
	if err := waitToken(ctx, pc.Subscribe(reply, 1, func(_ paho.Client, m paho.Message) {
		var p probeMsg
		if json.Unmarshal(m.Payload(), &p) == nil && p.Nonce == nonce && p.ID != self.ID {
			select {
			case answer <- p.Instance:
			default:
			}
		}
	}), timeout); err != nil {
		return nil, fmt.Errorf("subscribe %s: %w", reply, err)
	}
	body, _ := json.Marshal(probeMsg{Nonce: nonce, Instance: self})
	if err := waitToken(ctx, pc.Publish(ProbeTopic(prefix, device), 1, false, body), timeout); err != nil {
		return nil, fmt.Errorf("publish %s: %w", ProbeTopic(prefix, device), err)
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case other := <-answer:
		return nil, &DeviceOnlineError{Device: device, Other: other}
	case <-t.C:
		return st, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// prober answers other daemons' probes on the daemon's connection.
type prober struct {
	prefix, device string
	self           Instance
	onProbe        func(from Instance)
}

func (p *prober) subscribe(pc paho.Client) {
	pc.Subscribe(ProbeTopic(p.prefix, p.device), 1, func(c paho.Client, m paho.Message) {
		var q probeMsg
		if json.Unmarshal(m.Payload(), &q) != nil || q.Nonce == "" || q.ID == p.self.ID {
			return
		}
		b, _ := json.Marshal(probeMsg{Nonce: q.Nonce, Instance: p.self})
		c.Publish(ProbeTopic(p.prefix, p.device)+"/reply", 1, false, b)
		if p.onProbe != nil {
			p.onProbe(q.Instance)
		}
	})
}
