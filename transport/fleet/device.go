package fleet

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"
)

// Operations is what commands do on the device: the daemon's operations as
// its operator may call them.
type Operations interface {
	Status(ctx context.Context) (any, error)
	Restart(ctx context.Context, agentID string) (any, error)
	Stop(ctx context.Context, agentID string) (any, error)
	Start(ctx context.Context, agentID string) (any, error)
	LogsTail(n int) []string
	Config() any
	// Update fetches, verifies and installs the binary at url (SHA256SUMS
	// and its signature beside it) for the command id. Its outcome comes
	// later, from the daemon that runs after the restart (Outcome). A
	// version older than the running one is refused unless rollback (the
	// signed command's args.rollback).
	Update(ctx context.Context, url, commandID string, rollback bool) (any, error)
	// AfterUpdate restarts the daemon into an installed update; it is
	// called once the reply to the update command is delivered to the hub.
	AfterUpdate()
}

// DeviceConfig configures a Device.
type DeviceConfig struct {
	Prefix  string
	Device  string
	Trusted []ed25519.PublicKey
	Nonces  *Nonces
	Ops     Operations
	Log     zerolog.Logger
	Now     func() time.Time
}

// Device answers the commands addressed to one device.
type Device struct {
	cfg    DeviceConfig
	client paho.Client
	wg     sync.WaitGroup
}

// NewDevice returns a Device; Attach gives it its connection.
func NewDevice(cfg DeviceConfig) *Device {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Device{cfg: cfg}
}

// CommandTopic is the topic of one command for one device.
func CommandTopic(prefix, device, name string) string {
	return prefix + "/" + device + "/commands/" + name
}

// ReplyTopic is where the reply to a command goes.
func ReplyTopic(prefix, device, name string) string {
	return CommandTopic(prefix, device, name) + "/reply"
}

// Subscribe subscribes c to the device's commands; call it from the
// client's OnConnect handler (the daemon's session is clean).
func (d *Device) Subscribe(c paho.Client) {
	d.client = c
	filter := d.cfg.Prefix + "/" + d.cfg.Device + "/commands/+"
	tok := c.Subscribe(filter, 1, d.handle)
	go func() {
		if tok.WaitTimeout(10*time.Second) && tok.Error() != nil {
			d.cfg.Log.Error().Err(tok.Error()).Str("topic", filter).Msg("fleet: cannot subscribe to the device's commands")
		}
	}()
}

// Wait waits for the commands in flight.
func (d *Device) Wait() { d.wg.Wait() }

func (d *Device) handle(c paho.Client, msg paho.Message) {
	name := msg.Topic()[strings.LastIndexByte(msg.Topic(), '/')+1:]
	log := d.cfg.Log.With().Str("command", name).Logger()
	cmd, err := Open(d.cfg.Trusted, msg.Payload(), d.cfg.Device, name, d.cfg.Now())
	if err == nil {
		err = d.cfg.Nonces.Record(cmd.ID, cmd.ExpiresAt, d.cfg.Now())
	}
	if err != nil {
		var r *Refused
		code := "error"
		if errors.As(err, &r) {
			code = r.Code
		}
		log.Warn().Str("code", code).Str("topic", msg.Topic()).Msg("fleet: command refused: " + err.Error())
		d.deadLetter(c, msg, code, err.Error())
		return
	}
	log = log.With().Str("id", cmd.ID).Logger()
	log.Info().Msg("fleet: command accepted")
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ctx, cancel := context.WithDeadline(context.Background(), cmd.ExpiresAt)
		defer cancel()
		res, err := d.run(ctx, cmd)
		rep := Reply{ID: cmd.ID, Name: cmd.Name, Device: d.cfg.Device, OK: err == nil, Time: d.cfg.Now().UTC()}
		if err != nil {
			rep.Error = err.Error()
			log.Warn().Err(err).Msg("fleet: command failed")
		} else {
			rep.Result, _ = json.Marshal(res)
			log.Info().Msg("fleet: command done")
		}
		b, _ := json.Marshal(rep)
		tok := c.Publish(ReplyTopic(d.cfg.Prefix, d.cfg.Device, cmd.Name), 1, false, b)
		if cmd.Name == "update" && rep.OK {
			// Restart only once the hub has the reply (or after 5 s):
			// the restart drops the connection.
			tok.WaitTimeout(5 * time.Second)
			d.cfg.Ops.AfterUpdate()
		}
	}()
}

func (d *Device) run(ctx context.Context, cmd *Command) (any, error) {
	var args struct {
		Agent string `json:"agent"`
		Lines int    `json:"lines"`
		URL   string `json:"url"`
		// Rollback allows an update to an older version (see update).
		Rollback bool `json:"rollback"`
	}
	if len(cmd.Args) > 0 {
		if err := json.Unmarshal(cmd.Args, &args); err != nil {
			return nil, fmt.Errorf("%w: %v", errBadArgs, err)
		}
	}
	needAgent := func() error {
		if args.Agent == "" {
			return fmt.Errorf("%w: %s needs args.agent", errBadArgs, cmd.Name)
		}
		return nil
	}
	ops := d.cfg.Ops
	switch cmd.Name {
	case "status":
		return ops.Status(ctx)
	case "agent.restart":
		if err := needAgent(); err != nil {
			return nil, err
		}
		return ops.Restart(ctx, args.Agent)
	case "agent.stop":
		if err := needAgent(); err != nil {
			return nil, err
		}
		return ops.Stop(ctx, args.Agent)
	case "agent.start":
		if err := needAgent(); err != nil {
			return nil, err
		}
		return ops.Start(ctx, args.Agent)
	case "logs.tail":
		n := args.Lines
		if n <= 0 {
			n = 100
		}
		if n > MaxTailLines {
			n = MaxTailLines
		}
		return ops.LogsTail(n), nil
	case "config.get":
		return ops.Config(), nil
	case "update":
		if args.URL == "" {
			return nil, fmt.Errorf("%w: update needs args.url, the binary's URL (SHA256SUMS and SHA256SUMS.sig beside it)", errBadArgs)
		}
		return ops.Update(ctx, args.URL, cmd.ID, args.Rollback)
	}
	return nil, fmt.Errorf("unknown command %q", cmd.Name)
}

// MaxTailLines bounds logs.tail.
const MaxTailLines = 1000

// deadLetter publishes a refused command to the device's dead letter topic,
// in the shape the agents use.
func (d *Device) deadLetter(c paho.Client, msg paho.Message, code, reason string) {
	payload := msg.Payload()
	truncated := false
	if len(payload) > 4096 {
		payload, truncated = payload[:4096], true
	}
	enc, text := "utf-8", string(payload)
	if !utf8.Valid(payload) {
		enc, text = "base64", base64.StdEncoding.EncodeToString(payload)
	}
	b, _ := json.Marshal(map[string]any{
		"reason": reason, "code": code, "topic": msg.Topic(), "payload": text, "payload_encoding": enc,
		"payload_bytes": len(msg.Payload()), "truncated": truncated, "device": d.cfg.Device,
		"time": d.cfg.Now().UTC().Format(time.RFC3339Nano),
	})
	c.Publish(d.cfg.Prefix+"/"+d.cfg.Device+"/deadletter", 1, false, b)
}
