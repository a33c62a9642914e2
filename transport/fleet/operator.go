package fleet

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// SendCommand signs a command for device, publishes it and waits for its
// reply (within timeout, which is also the command's lifetime). For
// update, it waits for the second reply, the update's outcome, and
// returns the first one too.
func SendCommand(ctx context.Context, dial mqtt.DialOptions, prefix, device, name string, args json.RawMessage,
	priv ed25519.PrivateKey, timeout time.Duration) (*Reply, error) {
	replies, err := sendCommand(ctx, dial, prefix, device, name, args, priv, timeout)
	if len(replies) == 0 {
		return nil, err
	}
	return &replies[len(replies)-1], err
}

// SendUpdate is SendCommand for update: the first reply (installed, the
// device restarts) and the outcome, nil when it did not come in time.
// rollback, signed with the command, lets the device install a version
// older than the one it runs.
func SendUpdate(ctx context.Context, dial mqtt.DialOptions, prefix, device, url string, rollback bool,
	priv ed25519.PrivateKey, timeout time.Duration) (first, outcome *Reply, err error) {
	a := map[string]any{"url": url}
	if rollback {
		a["rollback"] = true
	}
	args, _ := json.Marshal(a)
	replies, err := sendCommand(ctx, dial, prefix, device, "update", args, priv, timeout)
	for i := range replies {
		if IsOutcome(replies[i]) {
			outcome = &replies[i]
		} else if first == nil {
			first = &replies[i]
		}
	}
	if outcome != nil {
		err = nil
	}
	return first, outcome, err
}

func sendCommand(ctx context.Context, dial mqtt.DialOptions, prefix, device, name string, args json.RawMessage,
	priv ed25519.PrivateKey, timeout time.Duration) ([]Reply, error) {
	if timeout <= 0 || timeout > MaxLifetime {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	idb := make([]byte, 8)
	_, _ = rand.Read(idb)
	now := time.Now()
	cmd := Command{ID: "c-" + hex.EncodeToString(idb), Name: name, Device: device, Args: args,
		IssuedAt: now.UTC(), ExpiresAt: now.Add(timeout).UTC()}
	env, err := Sign(priv, cmd)
	if err != nil {
		return nil, err
	}
	dial.Timeout = timeout
	got := make(chan Reply, 8)
	replies := ReplyTopic(prefix, device, name)
	push := func(r Reply) {
		select {
		case got <- r:
		default:
		}
	}
	onReply := func(_ paho.Client, m paho.Message) {
		var r Reply
		if json.Unmarshal(m.Payload(), &r) == nil && r.ID == cmd.ID {
			push(r)
		}
	}
	// An update restarts the device's daemon, and with it an embedded
	// broker: the connection is lost and the outcome, a reply nobody is
	// subscribed to then, is missed. The device also retains the outcome
	// on its update topic, with the command's id: read it there too, and
	// connect again when the connection is lost.
	onOutcome := func(_ paho.Client, m paho.Message) {
		var o Outcome
		if json.Unmarshal(m.Payload(), &o) == nil && o.ID == cmd.ID {
			push(OutcomeReply(o))
		}
	}
	connect := func() (paho.Client, error) {
		pc, err := mqtt.Dial(ctx, dial)
		if err != nil {
			return nil, err
		}
		if err := mqtt.WaitToken(ctx, pc.Subscribe(replies, 1, onReply), timeout); err != nil {
			pc.Disconnect(0)
			return nil, fmt.Errorf("mqtt: subscribe %s: %w", replies, err)
		}
		if name == "update" {
			if err := mqtt.WaitToken(ctx, pc.Subscribe(UpdateTopic(prefix, device), 1, onOutcome), timeout); err != nil {
				pc.Disconnect(0)
				return nil, fmt.Errorf("mqtt: subscribe %s: %w", UpdateTopic(prefix, device), err)
			}
		}
		return pc, nil
	}
	pc, err := connect()
	if err != nil {
		return nil, err
	}
	defer func() { pc.Disconnect(100) }()
	verified, err := mqtt.PublishReported(ctx, dial, pc, CommandTopic(prefix, device, name), env, timeout)
	if err != nil {
		return nil, err
	}
	unverified := ""
	if !verified {
		unverified = "; " + mqtt.UnverifiedHint(CommandTopic(prefix, device, name), dial.Username)
	}
	check := time.NewTicker(250 * time.Millisecond)
	defer check.Stop()
	var out []Reply
	for {
		select {
		case r := <-got:
			out = append(out, r)
			// An update answers twice: installed, then its outcome. A
			// failed update answers once.
			if name != "update" || !r.OK || IsOutcome(r) {
				return out, nil
			}
		case <-check.C:
			if name != "update" || pc.IsConnectionOpen() {
				continue
			}
			pc.Disconnect(0)
			for {
				if npc, err := connect(); err == nil {
					pc = npc
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(500 * time.Millisecond):
					continue
				}
				break
			}
		case <-ctx.Done():
			if len(out) > 0 {
				return out, fmt.Errorf("no outcome of the update from device %s within %s (%s/%s/update keeps the last one)", device, timeout, prefix, device)
			}
			return nil, fmt.Errorf("no reply from device %s within %s (the hub delivered the command%s: is the device online, and does it trust this key? its dead letter topic %s/%s/deadletter says why it refused a command)",
				device, timeout, unverified, prefix, device)
		}
	}
}

// DeviceView is one device in a fleet status: its last telemetry and its
// retained status.
type DeviceView struct {
	Device    string     `json:"device"`
	State     string     `json:"state"`            // online, offline, or "" when no status is retained
	Reason    string     `json:"reason,omitempty"` // why offline: stopped, connection lost
	Telemetry *Telemetry `json:"telemetry,omitempty"`
}

// CollectStatus reads the retained status and telemetry of every device on
// the hub for wait and returns them by device id.
func CollectStatus(ctx context.Context, dial mqtt.DialOptions, prefix string, wait time.Duration) ([]DeviceView, error) {
	pc, err := mqtt.Dial(ctx, dial)
	if err != nil {
		return nil, err
	}
	defer pc.Disconnect(100)
	var mu sync.Mutex
	views := map[string]*DeviceView{}
	view := func(dev string) *DeviceView {
		if v, ok := views[dev]; ok {
			return v
		}
		v := &DeviceView{Device: dev}
		views[dev] = v
		return v
	}
	device := func(topic string) string {
		rest := strings.TrimPrefix(topic, prefix+"/")
		dev, _, _ := strings.Cut(rest, "/")
		return dev
	}
	filters := map[string]byte{prefix + "/+/telemetry": 1, prefix + "/+/status": 1}
	tok := pc.SubscribeMultiple(filters, func(_ paho.Client, m paho.Message) {
		dev := device(m.Topic())
		if dev == "fleet" || len(m.Payload()) == 0 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.HasSuffix(m.Topic(), "/telemetry"):
			var t Telemetry
			if json.Unmarshal(m.Payload(), &t) == nil {
				view(dev).Telemetry = &t
			}
		case strings.HasSuffix(m.Topic(), "/status"):
			var s struct {
				State  string `json:"state"`
				Reason string `json:"reason"`
			}
			if json.Unmarshal(m.Payload(), &s) == nil {
				view(dev).State, view(dev).Reason = s.State, s.Reason
			}
		}
	})
	if err := mqtt.WaitToken(ctx, tok, wait+10*time.Second); err != nil {
		return nil, fmt.Errorf("mqtt: subscribe: %w", err)
	}
	select {
	case <-time.After(wait):
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	out := make([]DeviceView, 0, len(views))
	for _, v := range views {
		out = append(out, *v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out, nil
}
