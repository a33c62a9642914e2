package enroll

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/design"
)

// These errors are wrapped by what Enroll refuses.
var (
	// ErrBadToken is returned for a token that is unknown, spent or
	// expired.
	ErrBadToken = errors.New("enrolment token unknown, already used or expired")
	// ErrBadRequest is returned for a request that is not one.
	ErrBadRequest = errors.New("bad enrolment request")
	// ErrDeviceTaken is returned when the device id is enrolled with
	// another key and the token is not bound to it.
	ErrDeviceTaken = errors.New("device id enrolled with another key")
	// ErrNotDevice is returned for a device id that names a broker client
	// the hub did not create for a device (an operator's account, the
	// plugin's admin) or a reserved name: the hub never changes those.
	ErrNotDevice = errors.New("device id names a broker client that is not one of the hub's devices")
)

// reservedIDs are device ids the hub never enrols, whatever the broker
// holds: the usual names of the dynamic security plugin's admin.
var reservedIDs = []string{"admin", "hub-admin", "dynsec-admin"}

// Request is what a device sends to enrol.
type Request struct {
	Token     string `json:"token"`
	Device    string `json:"device,omitempty"` // the id it asks for; the token's wins
	PublicKey string `json:"public_key"`       // base64 ed25519
	// Proof is the signature, by the device's key, of ProofMessage.
	Proof string `json:"proof"`
}

// ProofMessage is what a device signs to show it holds its key.
func ProofMessage(token, publicKey string) []byte {
	return []byte("openstarry-enroll\x00" + token + "\x00" + publicKey)
}

// Credentials are what an enrolled device gets.
type Credentials struct {
	Device      string    `json:"device"`
	Broker      string    `json:"broker"`
	Username    string    `json:"username"`
	Password    string    `json:"password"`
	TopicPrefix string    `json:"topic_prefix"`
	Issued      time.Time `json:"issued"`
}

// TokenInfo is a token's file, STATE/tokens/{sha256 of the token}.json.
type TokenInfo struct {
	Device  string     `json:"device,omitempty"` // bound to this device id
	Created time.Time  `json:"created"`
	Expires time.Time  `json:"expires"`
	Used    *time.Time `json:"used,omitempty"`
	UsedBy  string     `json:"used_by,omitempty"`
}

// DeviceRecord is an enrolled device, STATE/devices/{id}.json.
type DeviceRecord struct {
	Device     string    `json:"device"`
	PublicKey  string    `json:"public_key"`
	Enrolled   time.Time `json:"enrolled"`
	Rotated    time.Time `json:"rotated"`
	Enrolments int       `json:"enrolments"`
}

// Controller creates and changes broker clients (*DynSec).
type Controller interface {
	Do(ctx context.Context, cmds ...Command) ([]error, error)
	// GetClient returns the broker's client, nil, nil when there is none.
	GetClient(ctx context.Context, username string) (*ClientInfo, error)
	Close()
}

// Hub enrols devices.
type Hub struct {
	State       string // directory
	Broker      string // the broker URL devices get
	TopicPrefix string
	// Dial connects to the broker's dynamic security plugin; one
	// connection per enrolment.
	Dial func(ctx context.Context) (Controller, error)
	Log  zerolog.Logger
	Now  func() time.Time
	// Reserved are more device ids the hub refuses (its admin user).
	Reserved []string

	mu sync.Mutex // one enrolment at a time in this process
}

func (h *Hub) now() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

func (h *Hub) dir(name string) (string, error) {
	d := filepath.Join(h.State, name)
	return d, os.MkdirAll(d, 0o700)
}

func tokenHash(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// NewToken makes a one-time token valid for ttl, bound to device when it
// is not empty, and records only its hash.
func NewToken(state, device string, ttl time.Duration, now time.Time) (string, error) {
	if device != "" {
		if err := agent.ValidateID(device); err != nil {
			return "", fmt.Errorf("device id: %w", err)
		}
		if (&Hub{}).reserved(device) {
			return "", fmt.Errorf("device id %q is reserved for the broker's administration: %w", device, ErrNotDevice)
		}
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	token := "ost_" + base64.RawURLEncoding.EncodeToString(b)
	h := &Hub{State: state}
	dir, err := h.dir("tokens")
	if err != nil {
		return "", err
	}
	data, _ := json.Marshal(TokenInfo{Device: device, Created: now.UTC(), Expires: now.Add(ttl).UTC()})
	if err := atomicfile.WriteFile(filepath.Join(dir, tokenHash(token)+".json"), data, 0o600); err != nil {
		return "", err
	}
	return token, nil
}

// Enroll spends req's token and returns the device's new credentials.
func (h *Hub) Enroll(ctx context.Context, req Request) (*Credentials, error) {
	pub, err := design.ParsePublicKey(req.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("%w: public_key: %v", ErrBadRequest, err)
	}
	proof, err := base64.StdEncoding.DecodeString(req.Proof)
	if err != nil || !ed25519.Verify(pub, ProofMessage(req.Token, req.PublicKey), proof) {
		return nil, fmt.Errorf("%w: proof is not a signature by public_key", ErrBadRequest)
	}
	if req.Device != "" {
		if err := agent.ValidateID(req.Device); err != nil {
			return nil, fmt.Errorf("%w: device: %v", ErrBadRequest, err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	tokens, err := h.dir("tokens")
	if err != nil {
		return nil, err
	}
	used, err := h.dir("used")
	if err != nil {
		return nil, err
	}
	devices, err := h.dir("devices")
	if err != nil {
		return nil, err
	}
	name := tokenHash(req.Token) + ".json"
	data, err := os.ReadFile(filepath.Join(tokens, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, ErrBadToken
	} else if err != nil {
		return nil, err
	}
	var tok TokenInfo
	if err := json.Unmarshal(data, &tok); err != nil {
		return nil, fmt.Errorf("token file %s: %w", name, err)
	}
	now := h.now()
	if !now.Before(tok.Expires) {
		return nil, fmt.Errorf("%w (expired %s)", ErrBadToken, tok.Expires.Format(time.RFC3339))
	}
	// Spend it: the rename is the one-time guarantee.
	if err := os.Rename(filepath.Join(tokens, name), filepath.Join(used, name)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, ErrBadToken
		}
		return nil, err
	}
	_ = atomicfile.SyncDir(h.State)
	_ = atomicfile.SyncDir(tokens)
	_ = atomicfile.SyncDir(used)
	refund := func(cause error) error {
		if err := os.Rename(filepath.Join(used, name), filepath.Join(tokens, name)); err != nil {
			return errors.Join(cause, fmt.Errorf("the token could not be put back: %w", err))
		}
		_ = atomicfile.SyncDir(tokens)
		return cause
	}
	dev := tok.Device
	if dev == "" {
		dev = req.Device
	}
	if dev == "" {
		sum := sha256.Sum256(pub)
		dev = "dev-" + hex.EncodeToString(sum[:6])
	}
	if h.reserved(dev) {
		return nil, refund(fmt.Errorf("%w: %q is reserved", ErrNotDevice, dev))
	}
	var rec DeviceRecord
	recPath := filepath.Join(devices, dev+".json")
	if b, err := os.ReadFile(recPath); err == nil {
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, refund(fmt.Errorf("device record %s: %w", recPath, err))
		}
		if rec.PublicKey != req.PublicKey && tok.Device != dev {
			return nil, refund(fmt.Errorf("%w: %s (give it a token bound to it: openstarry hub token --device %s)", ErrDeviceTaken, dev, dev))
		}
	}
	pw := make([]byte, 24)
	if _, err := rand.Read(pw); err != nil {
		return nil, refund(err)
	}
	password := base64.RawURLEncoding.EncodeToString(pw)
	if err := h.setClient(ctx, dev, password, rec.Enrolments > 0); err != nil {
		return nil, refund(err)
	}
	if rec.Enrolments == 0 {
		rec = DeviceRecord{Device: dev, Enrolled: now.UTC()}
	}
	rec.PublicKey, rec.Rotated = req.PublicKey, now.UTC()
	rec.Enrolments++
	b, _ := json.MarshalIndent(rec, "", "  ")
	if err := atomicfile.WriteFile(recPath, b, 0o600); err != nil {
		return nil, err // the broker has the new password; the device retries with a new token
	}
	t := now.UTC()
	tok.Used, tok.UsedBy = &t, dev
	b, _ = json.Marshal(tok)
	_ = atomicfile.WriteFile(filepath.Join(used, name), b, 0o600)
	h.Log.Info().Str("device", dev).Int("enrolments", rec.Enrolments).Str("key", design.KeyID(pub)).Msg("hub: device enrolled")
	return &Credentials{Device: dev, Broker: h.Broker, Username: dev, Password: password, TopicPrefix: h.TopicPrefix, Issued: t}, nil
}

func (h *Hub) reserved(dev string) bool {
	for _, r := range append(reservedIDs, h.Reserved...) {
		if strings.EqualFold(dev, r) {
			return true
		}
	}
	return false
}

// RoleName is the broker role of a device.
func RoleName(device string) string { return "openstarry-device-" + device }

// deviceACLs are what a device may do: everything on its own topics, read
// the fleet's tasks and claims, publish fleet claims.
func (h *Hub) deviceACLs(dev string) []map[string]any {
	p := h.TopicPrefix
	acl := func(typ, topic string) map[string]any {
		return map[string]any{"acltype": typ, "topic": topic, "allow": true}
	}
	return []map[string]any{
		acl("publishClientSend", p+"/"+dev+"/#"),
		acl("subscribePattern", p+"/"+dev+"/#"),
		acl("publishClientSend", p+"/fleet/claims/#"),
		acl("subscribePattern", p+"/fleet/#"),
		acl("subscribePattern", "$share/+/"+p+"/fleet/tasks"),
	}
}

// textName is the broker client's text name for a device: with its role,
// what marks a client as one the hub created.
func textName(dev string) string { return "openstarry device " + dev }

// setClient creates the device's role and client, or, for a device seen
// before, gives it the new password and disconnects what logged in with
// the old one. It changes only a client the hub created for a device:
// one it has a record of (seen) that carries the device's text name and
// role on the broker. Any other client of that name is refused with
// ErrNotDevice and left as it is.
func (h *Hub) setClient(ctx context.Context, dev, password string, seen bool) error {
	ds, err := h.Dial(ctx)
	if err != nil {
		return fmt.Errorf("hub: the broker's dynamic security plugin: %w", err)
	}
	defer ds.Close()
	role := RoleName(dev)
	info, err := ds.GetClient(ctx, dev)
	if err != nil {
		return err
	}
	if info != nil {
		if !seen {
			return fmt.Errorf("%w: the broker has a client %q the hub has no record of enrolling; it is left unchanged (enrol under another id)", ErrNotDevice, dev)
		}
		if info.Textname != textName(dev) || !info.HasRole(role) {
			return fmt.Errorf("%w: the broker's client %q is not marked as the hub's (text name %q, role %s missing); it is left unchanged", ErrNotDevice, dev, info.Textname, role)
		}
		return h.rotate(ctx, ds, dev, password)
	}
	errs, err := ds.Do(ctx,
		Command{"command": "createRole", "rolename": role, "textname": textName(dev), "acls": h.deviceACLs(dev)},
		Command{"command": "createClient", "username": dev, "password": password, "textname": textName(dev),
			"roles": []map[string]any{{"rolename": role}}})
	if err != nil {
		return err
	}
	if errs[0] != nil && !IsExists(errs[0]) {
		return errs[0]
	}
	if IsExists(errs[1]) {
		// Created by someone else between getClient and createClient.
		return fmt.Errorf("%w: the broker's client %q appeared while enrolling; it is left unchanged", ErrNotDevice, dev)
	}
	return errs[1]
}

// rotate gives the hub's client dev a new password: the old one stops
// working at once, and the sessions it opened are closed.
func (h *Hub) rotate(ctx context.Context, ds Controller, dev, password string) error {
	errs, err := ds.Do(ctx,
		Command{"command": "setClientPassword", "username": dev, "password": password},
		Command{"command": "disableClient", "username": dev},
		Command{"command": "enableClient", "username": dev})
	if err != nil {
		return err
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}
