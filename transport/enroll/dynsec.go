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
	pending map[string]chan response
}

// response is the plugin's answer to one command.
type response struct {
	err  error
	data json.RawMessage
}

// DialDynSec connects to the broker as the plugin's admin user.
func DialDynSec(ctx context.Context, dial mqtt.DialOptions) (*DynSec, error) {
	pc, err := mqtt.Dial(ctx, dial)
	if err != nil {
		return nil, err
	}
	d := &DynSec{c: pc, pending: map[string]chan response{}}
	if err := mqtt.WaitToken(ctx, pc.Subscribe(DynSecResponse, 1, d.onResponse), 10*time.Second); err != nil {
		pc.Disconnect(100)
		return nil, fmt.Errorf("dynsec: subscribe %s (is the dynamic security plugin loaded, and is this its admin?): %w", DynSecResponse, err)
	}
	return d, nil
}

func (d *DynSec) onResponse(_ paho.Client, m paho.Message) {
	var r struct {
		Responses []struct {
			Command     string          `json:"command"`
			Error       string          `json:"error"`
			Correlation string          `json:"correlationData"`
			Data        json.RawMessage `json:"data"`
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
		ch <- response{err: err, data: x.Data}
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
	rs, err := d.do(ctx, cmds...)
	if err != nil {
		return nil, err
	}
	errs := make([]error, len(rs))
	for i, r := range rs {
		errs[i] = r.err
	}
	return errs, nil
}

// ClientInfo is what the plugin says of one client (getClient).
type ClientInfo struct {
	Username string `json:"username"`
	Textname string `json:"textname"`
	Roles    []struct {
		Rolename string `json:"rolename"`
	} `json:"roles"`
	Disabled bool `json:"disabled"`
}

// HasRole reports whether the client has the role.
func (c *ClientInfo) HasRole(role string) bool {
	for _, r := range c.Roles {
		if r.Rolename == role {
			return true
		}
	}
	return false
}

// GetClient returns the broker's client username, or nil, nil when the
// broker has none of that name.
func (d *DynSec) GetClient(ctx context.Context, username string) (*ClientInfo, error) {
	rs, err := d.do(ctx, Command{"command": "getClient", "username": username})
	if err != nil {
		return nil, err
	}
	if rs[0].err != nil {
		if isNotFound(rs[0].err) {
			return nil, nil
		}
		return nil, rs[0].err
	}
	var v struct {
		Client *ClientInfo `json:"client"`
	}
	if err := json.Unmarshal(rs[0].data, &v); err != nil || v.Client == nil || v.Client.Username != username {
		return nil, fmt.Errorf("dynsec getClient %s: an answer that is not the client: %.200s", username, rs[0].data)
	}
	return v.Client, nil
}

// isNotFound reports whether err says the object does not exist.
func isNotFound(err error) bool {
	var de *DynSecError
	return errors.As(err, &de) && (de.Msg == "Client not found" || de.Msg == "Role not found")
}

func (d *DynSec) do(ctx context.Context, cmds ...Command) ([]response, error) {
	chans := make([]chan response, len(cmds))
	ids := make([]string, len(cmds))
	d.mu.Lock()
	for i, c := range cmds {
		d.seq++
		ids[i] = "openstarry-" + strconv.FormatUint(d.seq, 10)
		chans[i] = make(chan response, 1)
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
	rs := make([]response, len(cmds))
	for i, ch := range chans {
		select {
		case rs[i] = <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("dynsec: no response to %v from the broker: %w", cmds[i]["command"], ctx.Err())
		}
	}
	return rs, nil
}

// Close disconnects.
func (d *DynSec) Close() { d.c.Disconnect(100) }
