package broker

import (
	"bytes"
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// Roles of a broker user.
const (
	RoleDevice = "device" // only its own device's topics and the fleet task topic
	RoleHub    = "hub"    // every topic
)

// User is one account of the embedded broker.
type User struct {
	Username string `json:"username"`
	// PasswordHash is the password in one of the formats ParsePasswordHash
	// accepts, never the password itself.
	PasswordHash string `json:"password_hash"`
	// Role is RoleDevice (the default) or RoleHub.
	Role string `json:"role,omitempty"`
	// Device is the device id whose topics a device user may use; default
	// the user name.
	Device string `json:"device,omitempty"`
}

// UsersFile is the JSON of a users file:
//
//	{"users": [
//	  {"username": "pi-kitchen", "password_hash": "$7$101$...", "device": "pi-kitchen"},
//	  {"username": "hub", "password_hash": "$7$101$...", "role": "hub"}
//	]}
type UsersFile struct {
	Users []User `json:"users"`
}

// LoadUsers reads and checks a users file. Unknown fields are errors.
func LoadUsers(path string) ([]User, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("broker users: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f UsersFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("broker users %s: %w", path, err)
	}
	if err := checkUsers(f.Users); err != nil {
		return nil, fmt.Errorf("broker users %s: %w", path, err)
	}
	return f.Users, nil
}

func checkUsers(users []User) error {
	seen := map[string]bool{}
	for i, u := range users {
		switch {
		case u.Username == "":
			return fmt.Errorf("users[%d]: empty username", i)
		case seen[u.Username]:
			return fmt.Errorf("users[%d]: username %q appears twice", i, u.Username)
		case u.Role != "" && u.Role != RoleDevice && u.Role != RoleHub:
			return fmt.Errorf("users[%d] (%s): role %q (want %q or %q)", i, u.Username, u.Role, RoleDevice, RoleHub)
		}
		seen[u.Username] = true
		if _, err := ParsePasswordHash(u.PasswordHash); err != nil {
			return fmt.Errorf("users[%d] (%s): %w", i, u.Username, err)
		}
		if u.Role != RoleHub {
			dev := u.Device
			if dev == "" {
				dev = u.Username
			}
			if err := agent.ValidateID(dev); err != nil {
				return fmt.Errorf("users[%d] (%s): device: %w", i, u.Username, err)
			}
		}
	}
	return nil
}

// ErrBadPasswordHash is returned by ParsePasswordHash for a string in no
// known format.
var ErrBadPasswordHash = errors.New("password hash in no known format")

// PasswordHash is a parsed password hash.
type PasswordHash struct {
	kind  string // "pbkdf2-sha512", "sha512", "pbkdf2-sha256"
	iter  int
	salt  []byte
	value []byte
}

// ParsePasswordHash accepts:
//
//	$7$ITER$SALT$HASH              PBKDF2-HMAC-SHA512 (mosquitto_passwd of Mosquitto 2)
//	$6$SALT$HASH                   SHA-512 of password then salt (mosquitto_passwd of Mosquitto 1.x)
//	pbkdf2-sha256$ITER$SALT$HASH   PBKDF2-HMAC-SHA256
//
// SALT and HASH are standard base64. A mosquitto password file line is
// "user:HASH"; the part after the colon is what goes here.
func ParsePasswordHash(s string) (*PasswordHash, error) {
	parts := strings.Split(s, "$")
	bad := func(why string) (*PasswordHash, error) {
		return nil, fmt.Errorf("%w: %s", ErrBadPasswordHash, why)
	}
	var h PasswordHash
	var salt, value string
	switch {
	case len(parts) == 5 && parts[0] == "" && parts[1] == "7":
		h.kind = "pbkdf2-sha512"
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 1 {
			return bad("$7$ iteration count " + strconv.Quote(parts[2]))
		}
		h.iter, salt, value = n, parts[3], parts[4]
	case len(parts) == 4 && parts[0] == "" && parts[1] == "6":
		h.kind, salt, value = "sha512", parts[2], parts[3]
	case len(parts) == 4 && parts[0] == "pbkdf2-sha256":
		h.kind = "pbkdf2-sha256"
		n, err := strconv.Atoi(parts[1])
		if err != nil || n < 1 {
			return bad("pbkdf2-sha256 iteration count " + strconv.Quote(parts[1]))
		}
		h.iter, salt, value = n, parts[2], parts[3]
	default:
		return bad("want $7$ITER$SALT$HASH, $6$SALT$HASH or pbkdf2-sha256$ITER$SALT$HASH")
	}
	var err error
	if h.salt, err = base64.StdEncoding.DecodeString(salt); err != nil || len(h.salt) == 0 {
		return bad("salt is not base64")
	}
	if h.value, err = base64.StdEncoding.DecodeString(value); err != nil || len(h.value) < 16 {
		return bad("hash is not base64 of at least 16 bytes")
	}
	return &h, nil
}

// Verify reports whether password matches, in time independent of where
// the two differ.
func (h *PasswordHash) Verify(password string) bool {
	var got []byte
	switch h.kind {
	case "pbkdf2-sha512":
		got = pbkdf(sha512.New, password, h.salt, h.iter, len(h.value))
	case "pbkdf2-sha256":
		got = pbkdf(sha256.New, password, h.salt, h.iter, len(h.value))
	case "sha512":
		d := sha512.New()
		d.Write([]byte(password))
		d.Write(h.salt)
		got = d.Sum(nil)
	}
	return len(got) == len(h.value) && subtle.ConstantTimeCompare(got, h.value) == 1
}

func pbkdf(fn func() hash.Hash, password string, salt []byte, iter, n int) []byte {
	k, err := pbkdf2.Key(fn, password, salt, iter, n)
	if err != nil {
		return nil
	}
	return k
}

// DefaultHashIterations is the PBKDF2 iteration count HashPassword uses.
// Verification runs once per user and password per broker process (results
// are cached), so a slow board pays it at the first connection only.
const DefaultHashIterations = 20000

// HashPassword returns password in the $7$ format (PBKDF2-HMAC-SHA512, a
// random 12-byte salt, DefaultHashIterations), which Mosquitto 2 reads too.
func HashPassword(password string) (string, error) {
	salt := make([]byte, 12)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	k, err := pbkdf2.Key(sha512.New, password, salt, DefaultHashIterations, 64)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("$7$%d$%s$%s", DefaultHashIterations,
		base64.StdEncoding.EncodeToString(salt), base64.StdEncoding.EncodeToString(k)), nil
}

// account is a User ready for checks.
type account struct {
	User
	hash *PasswordHash
}

// authHook authenticates connections and checks topic access.
type authHook struct {
	mqtt.HookBase
	prefix   string
	accounts map[string]*account

	mu       sync.Mutex      // guards verified
	verified map[string]bool // hmac(key, user, password) of checked good passwords
	key      []byte          // per-process key of verified
}

func newAuthHook(users []User, prefix string) (*authHook, error) {
	if err := checkUsers(users); err != nil {
		return nil, err
	}
	h := &authHook{prefix: prefix, accounts: map[string]*account{}, verified: map[string]bool{}, key: make([]byte, 32)}
	if _, err := rand.Read(h.key); err != nil {
		return nil, err
	}
	for _, u := range users {
		ph, _ := ParsePasswordHash(u.PasswordHash) // checked above
		if u.Role == "" {
			u.Role = RoleDevice
		}
		if u.Role == RoleDevice && u.Device == "" {
			u.Device = u.Username
		}
		h.accounts[u.Username] = &account{User: u, hash: ph}
	}
	return h, nil
}

func (h *authHook) ID() string { return "openstarry-auth" }

func (h *authHook) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck
}

// OnConnectAuthenticate admits anonymous clients from loopback and users
// whose password matches.
func (h *authHook) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	user := string(pk.Connect.Username)
	if user == "" {
		if isLoopback(cl.Net.Remote) {
			return true
		}
		h.Log.Warn("refused anonymous client from off loopback", "client", cl.ID, "remote", cl.Net.Remote)
		return false
	}
	acct, ok := h.accounts[user]
	if !ok || !h.check(acct, pk.Connect.Password) {
		h.Log.Warn("refused client: bad user name or password", "client", cl.ID, "remote", cl.Net.Remote, "username", user)
		return false
	}
	return true
}

func (h *authHook) check(acct *account, password []byte) bool {
	m := hmac.New(sha256.New, h.key)
	m.Write([]byte(acct.Username))
	m.Write([]byte{0})
	m.Write(password)
	k := string(m.Sum(nil))
	h.mu.Lock()
	ok := h.verified[k]
	h.mu.Unlock()
	if ok {
		return true
	}
	if !acct.hash.Verify(string(password)) {
		return false
	}
	h.mu.Lock()
	if len(h.verified) > 4096 {
		clear(h.verified)
	}
	h.verified[k] = true
	h.mu.Unlock()
	return true
}

// OnACLCheck allows a device user its own device's topics and the fleet
// task topic (subscribe only); everyone else who got in may use any topic.
func (h *authHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	user := string(cl.Properties.Username)
	if user == "" {
		return true // anonymous clients are loopback clients
	}
	acct, ok := h.accounts[user]
	if !ok {
		return false
	}
	if acct.Role == RoleHub {
		return true
	}
	return DeviceMayUse(h.prefix, acct.Device, topic, write)
}

// DeviceMayUse reports whether a device user of device may publish (write)
// to, or subscribe to or receive from, topic (a topic or a filter): its own
// topics, the fleet task topic (read), the fleet's claims (read and write).
func DeviceMayUse(prefix, device, topic string, write bool) bool {
	if !write && mqtt.IsSharedFilter(topic) {
		// $share/{group}/{filter}
		parts := strings.SplitN(topic, "/", 3)
		if len(parts) != 3 || parts[1] == "" {
			return false
		}
		topic = parts[2]
	}
	own := prefix + "/" + device + "/"
	if strings.HasPrefix(topic, own) {
		return true // prefix and device hold no wildcard: both are checked ids
	}
	if strings.HasPrefix(topic, prefix+"/fleet/claims/") {
		return true // every device claims fleet tasks and reads the claims
	}
	return !write && topic == prefix+"/fleet/tasks"
}

// isLoopback reports whether a remote address ("127.0.0.1:5000",
// "[::1]:5000") is a loopback address.
func isLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Interface guards.
var _ mqtt.Hook = (*authHook)(nil)
