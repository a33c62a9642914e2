// Package fleet owns what a device does for the operator of a fleet through
// the hub it already talks to: signed remote commands with their replies,
// the retained telemetry a fleet view reads, and the outcome of a
// self-update.
//
// A command is obeyed only when it is signed with a fleet key the device
// trusts (the ed25519 keys that sign templates), names this device, has not
// expired, and was never seen before (its id is a nonce the device keeps on
// disk until the command expires). Anything else is refused to the dead
// letter topic with the reason, and logged. The operator's side signs with
// `openstarry fleet command`, which waits for the reply. The web UI's fleet
// view (web.go) reads the devices' retained status and telemetry and
// publishes fleet tasks through the daemon's hub connection settings.
package fleet

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
)

// Commands are the names a device obeys.
var Commands = []string{"status", "agent.restart", "agent.stop", "agent.start", "logs.tail", "config.get", "update"}

// MaxLifetime bounds how far in the future a command may expire: the device
// keeps every command id it obeyed until then, so the bound also bounds
// what it keeps. MaxSkew is the clock difference tolerated on issued_at.
const (
	MaxLifetime    = 15 * time.Minute
	MaxSkew        = 2 * time.Minute
	MaxCommandSize = 16 << 10
)

// Command is what the operator signs.
type Command struct {
	ID        string          `json:"id"`   // correlation id of the reply, and a nonce
	Name      string          `json:"name"` // one of Commands
	Device    string          `json:"device"`
	Args      json.RawMessage `json:"args,omitempty"`
	IssuedAt  time.Time       `json:"issued_at"`
	ExpiresAt time.Time       `json:"expires_at"`
}

// Envelope is the message on {prefix}/{device}/commands/{name}: the command's
// exact bytes and their signature ("ed25519:KEYID:BASE64" as templates use).
type Envelope struct {
	Command json.RawMessage `json:"command"`
	Sig     string          `json:"sig"`
}

// Reply is published on {prefix}/{device}/commands/{name}/reply.
type Reply struct {
	ID     string          `json:"id"`
	Name   string          `json:"name"`
	Device string          `json:"device"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	Time   time.Time       `json:"time"`
}

// Refusal codes, in the dead letter's "code".
const (
	CodeBadCommand = "bad_command"  // not an envelope, not a command, unknown name
	CodeUnsigned   = "unsigned"     // no signature, or none the device trusts
	CodeWrongDev   = "wrong_device" // signed for another device
	CodeExpired    = "expired"      // expired, or issued in the future, or living too long
	CodeReplayed   = "replayed"     // this id was obeyed before
	CodeNoKey      = "no_fleet_key" // the device trusts no fleet key: it obeys nothing
)

// Refused is why a command was not obeyed.
type Refused struct {
	Code   string
	Reason string
}

func (r *Refused) Error() string { return r.Reason }

func refuse(code, format string, a ...any) error {
	return &Refused{Code: code, Reason: fmt.Sprintf(format, a...)}
}

// Sign makes the envelope of cmd.
func Sign(priv ed25519.PrivateKey, cmd Command) ([]byte, error) {
	raw, err := json.Marshal(cmd)
	if err != nil {
		return nil, err
	}
	return json.Marshal(Envelope{Command: raw, Sig: design.Sign(priv, raw)})
}

// Open checks an envelope addressed to device on topic name and returns its
// command. It does not check the nonce: the caller records it (Nonces).
func Open(trusted []ed25519.PublicKey, data []byte, device, name string, now time.Time) (*Command, error) {
	if len(data) > MaxCommandSize {
		return nil, refuse(CodeBadCommand, "command of %d bytes, at most %d", len(data), MaxCommandSize)
	}
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil || len(env.Command) == 0 {
		return nil, refuse(CodeBadCommand, "not a command envelope {\"command\", \"sig\"}")
	}
	if len(trusted) == 0 {
		return nil, refuse(CodeNoKey, "this device trusts no fleet key (design.trusted_keys): it obeys no command")
	}
	if env.Sig == "" {
		return nil, refuse(CodeUnsigned, "the command is not signed")
	}
	if err := design.Verify(trusted, env.Command, env.Sig); err != nil {
		return nil, refuse(CodeUnsigned, "the signature does not verify with a trusted fleet key: %v", err)
	}
	var cmd Command
	if err := json.Unmarshal(env.Command, &cmd); err != nil {
		return nil, refuse(CodeBadCommand, "the signed command is not JSON: %v", err)
	}
	switch {
	case agent.ValidateID(cmd.ID) != nil:
		return nil, refuse(CodeBadCommand, "command id %q is not a valid id", cmd.ID)
	case cmd.Name != name:
		return nil, refuse(CodeBadCommand, "command %q published on the topic of %q", cmd.Name, name)
	case !known(cmd.Name):
		return nil, refuse(CodeBadCommand, "unknown command %q (known: %v)", cmd.Name, Commands)
	case cmd.Device != device:
		return nil, refuse(CodeWrongDev, "the command is signed for device %q, this is %q", cmd.Device, device)
	case !now.Before(cmd.ExpiresAt):
		return nil, refuse(CodeExpired, "the command expired at %s", cmd.ExpiresAt.UTC().Format(time.RFC3339))
	case cmd.IssuedAt.After(now.Add(MaxSkew)):
		return nil, refuse(CodeExpired, "the command is issued in the future (%s)", cmd.IssuedAt.UTC().Format(time.RFC3339))
	case cmd.ExpiresAt.Sub(now) > MaxLifetime:
		return nil, refuse(CodeExpired, "the command lives longer than %s", MaxLifetime)
	}
	return &cmd, nil
}

func known(name string) bool {
	for _, n := range Commands {
		if n == name {
			return true
		}
	}
	return false
}

var errBadArgs = errors.New("bad arguments")
