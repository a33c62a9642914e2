package enroll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// The dynamic security plugin's topics.
const (
	DynSecTopic    = "$CONTROL/dynamic-security/v1"
	DynSecResponse = DynSecTopic + "/response"
)

// Command is one dynamic security command: {"command": NAME, ...}.
type Command map[string]any

// DynSec sends commands to Mosquitto's dynamic security plugin as its
// admin client and waits for their responses.
type DynSec struct {
	c       paho.Client
	mu      sync.Mutex // guards seq and pending
	seq     uint64
	pending map[string]chan error
}

// DialDynSec connects to the broker as the plugin's admin user.
func DialDynSec(ctx context.Context, dial mqtt.DialOptions) (*DynSec, error) {
	pc, err := mqtt.Dial(ctx, dial)
	if err != nil {
		return nil, err
	}
	d := &DynSec{c: pc, pending: map[string]chan error{}}
	if err := mqtt.WaitToken(ctx, pc.Subscribe(DynSecResponse, 1, d.onResponse), 10*time.Second); err != nil {
		pc.Disconnect(100)
		return nil, fmt.Errorf("dynsec: subscribe %s (is the dynamic security plugin loaded, and is this its admin?): %w", DynSecResponse, err)
	}
	return d, nil
}

func (d *DynSec) onResponse(_ paho.Client, m paho.Message) {
	var r struct {
		Responses []struct {
			Command     string `json:"command"`
			Error       string `json:"error"`
			Correlation string `json:"correlationData"`
		} `json:"responses"`
	}
	if json.Unmarshal(m.Payload(), &r) != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, x := range r.Responses {
		ch, ok := d.pending[x.Correlation]
		if !ok {
			continue
		}
		delete(d.pending, x.Correlation)
		var err error
		if x.Error != "" {
			err = &DynSecError{Command: x.Command, Msg: x.Error}
		}
		ch <- err
	}
}

// DynSecError is the plugin's refusal of one command.
type DynSecError struct {
	Command, Msg string
}

func (e *DynSecError) Error() string { return "dynsec " + e.Command + ": " + e.Msg }

// IsExists reports whether err says the object already exists.
func IsExists(err error) bool {
	var de *DynSecError
	return errors.As(err, &de) && (de.Msg == "Client already exists" || de.Msg == "Role already exists" ||
		de.Msg == "Group already exists" || de.Msg == "ACL with this topic already exists")
}

// Do sends the commands in one message and returns each one's error (nil
// for success), in order; err is set when the exchange itself failed.
func (d *DynSec) Do(ctx context.Context, cmds ...Command) ([]error, error) {
	chans := make([]chan error, len(cmds))
	ids := make([]string, len(cmds))
	d.mu.Lock()
	for i, c := range cmds {
		d.seq++
		ids[i] = "openstarry-" + strconv.FormatUint(d.seq, 10)
		chans[i] = make(chan error, 1)
		d.pending[ids[i]] = chans[i]
		c["correlationData"] = ids[i]
	}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		for _, id := range ids {
			delete(d.pending, id)
		}
		d.mu.Unlock()
	}()
	body, err := json.Marshal(map[string]any{"commands": cmds})
	if err != nil {
		return nil, err
	}
	if err := mqtt.WaitToken(ctx, d.c.Publish(DynSecTopic, 1, false, body), 10*time.Second); err != nil {
		return nil, fmt.Errorf("dynsec: publish: %w", err)
	}
	errs := make([]error, len(cmds))
	for i, ch := range chans {
		select {
		case errs[i] = <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("dynsec: no response to %v from the broker: %w", cmds[i]["command"], ctx.Err())
		}
	}
	return errs, nil
}

// Close disconnects.
func (d *DynSec) Close() { d.c.Disconnect(100) }
