package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// ClaimTopic is where the claim of a fleet task is retained.
func ClaimTopic(prefix, taskID string) string { return prefix + "/fleet/claims/" + taskID }

// Claim states.
const (
	ClaimRunning = "running" // claimed; the task is queued or running
	ClaimDone    = "done"    // its result was delivered
)

// Claim is the retained payload of ClaimTopic.
type Claim struct {
	TaskID  string    `json:"task_id"`
	Device  string    `json:"device"`
	State   string    `json:"state"`
	Expires time.Time `json:"expires"`
	Nonce   string    `json:"nonce"`
	// Restore marks a claim published again by a device that lost the
	// race to it: it is the owner's, whatever came before.
	Restore bool `json:"restore,omitempty"`
}

// Defaults of ClaimsConfig.
const (
	DefaultClaimRunTTL  = time.Hour
	DefaultClaimDoneTTL = 24 * time.Hour
)

// ClaimsConfig configures Claims.
type ClaimsConfig struct {
	Broker                    string
	Username, Password        string
	CAFile, CertFile, KeyFile string
	Prefix, Device            string
	// Agent is the agent whose fleet tasks these claims gate: the client
	// id is the agent's with "-claims" (ClaimsClientID), so that two
	// processes of one device never take each other's connection.
	Agent string
	// RunTTL is how long a claim holds while its task is queued or runs;
	// a device that died with it holds it that long. Default 1h.
	RunTTL time.Duration
	// DoneTTL is how long the claim of a task whose result was delivered
	// keeps other devices from running it again; then it is cleared.
	// Default 24h.
	DoneTTL time.Duration
	Log     zerolog.Logger
}

// Claims makes a fleet task run on one device only. Every device
// subscribes to {prefix}/fleet/claims/+ and keeps the claims it sees.
// Before a fleet task runs, the device publishes its claim, retained, and
// waits for the broker to send it back: the broker sends one topic's
// messages to every subscriber in the same order, so every device agrees
// that the first claim of a task to come back wins. A device that lost
// publishes the winner's claim again (Restore), since its own overwrote the
// retained copy, drops the task and names the owner.
//
// What remains (docs/fleet.md): a broker that does not keep one order
// per topic for all subscribers (a cluster of brokers), a claim that
// expired, and the retained claims lost by the broker.
type Claims struct {
	cfg    ClaimsConfig
	client paho.Client

	mu       sync.Mutex // guards the fields below
	ready    chan struct{}
	isReady  bool
	disabled bool                      // the broker refuses the claims: tasks run unclaimed
	seen     map[string]Claim          // task id → the claim that holds
	pending  map[string]chan claimWait // nonce → the Claim call waiting for its echo
	stop     context.CancelFunc
}

type claimWait struct {
	won   bool
	owner string
}

func init() {
	mqtt.RegisterClaims(func(c mqtt.Config) (mqtt.Claims, error) {
		return NewClaims(ClaimsConfig{Broker: c.Broker, Username: c.Username, Password: c.Password,
			CAFile: c.CAFile, CertFile: c.CertFile, KeyFile: c.KeyFile, Prefix: c.TopicPrefix, Device: c.Device,
			Agent: c.Agent, Log: c.Log.With().Str("component", "claims").Logger()})
	})
}

// StartClaims is NewClaims, then Connect.
func StartClaims(cfg ClaimsConfig) (*Claims, error) {
	c, err := NewClaims(cfg)
	if err != nil {
		return nil, err
	}
	c.Connect()
	return c, nil
}

// Connect connects in the background and subscribes to the claims, again
// after every reconnection; Claim waits for the first subscription.
func (c *Claims) Connect() {
	c.client.Connect()
}

// ClaimsClientID is the client id of an agent's claims connection
// (clean session): openstarry-{device}-{agent}-claims. Without an agent, a
// random one.
func ClaimsClientID(device, agent string) string {
	if agent == "" {
		b := make([]byte, 6)
		_, _ = rand.Read(b)
		agent = "x" + hex.EncodeToString(b)
	}
	return mqtt.ClientID(device, agent) + "-claims"
}

// NewClaims returns Claims that are not connected yet.
func NewClaims(cfg ClaimsConfig) (*Claims, error) {
	if cfg.RunTTL <= 0 {
		cfg.RunTTL = DefaultClaimRunTTL
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = DefaultClaimDoneTTL
	}
	u, secure, err := mqtt.ParseBrokerURL(cfg.Broker)
	if err != nil {
		return nil, err
	}
	c := &Claims{cfg: cfg, ready: make(chan struct{}), seen: map[string]Claim{}, pending: map[string]chan claimWait{}}
	filter := cfg.Prefix + "/fleet/claims/+"
	opts := paho.NewClientOptions().AddBroker(u.String()).SetClientID(ClaimsClientID(cfg.Device, cfg.Agent)).
		SetCleanSession(true).SetProtocolVersion(4).SetOrderMatters(true).
		SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(time.Second).SetMaxReconnectInterval(30 * time.Second).
		SetOnConnectHandler(func(pc paho.Client) {
			tok := pc.Subscribe(filter, 1, c.onClaim)
			go func() {
				if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
					c.cfg.Log.Error().Err(tok.Error()).Str("topic", filter).Msg("fleet: cannot subscribe to the claims; fleet tasks wait")
					return
				}
				st, ok := tok.(*paho.SubscribeToken)
				refused := ok && st.Result()[filter] > 2
				c.mu.Lock()
				if refused && !c.disabled {
					c.cfg.Log.Error().Str("topic", filter).Msg("fleet: the broker refused the subscription to the claims (allow devices " +
						c.cfg.Prefix + "/fleet/claims/# in its ACL): fleet tasks run unclaimed, and a task id sent twice may run on two devices")
				} else if !refused {
					c.cfg.Log.Info().Str("topic", filter).Msgf("fleet: subscribed to the claims %s", filter)
				}
				c.disabled = refused
				if !c.isReady {
					c.isReady = true
					close(c.ready)
				}
				c.mu.Unlock()
			}()
		})
	if cfg.Username != "" {
		opts.SetUsername(cfg.Username).SetPassword(cfg.Password)
	}
	if secure {
		tc, err := mqtt.TLSConfig(u, secure, cfg.CAFile, cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		opts.SetTLSConfig(tc)
	}
	c.client = paho.NewClient(opts)
	ctx, cancel := context.WithCancel(context.Background())
	c.stop = cancel
	go c.sweep(ctx)
	return c, nil
}

// Close disconnects.
func (c *Claims) Close() {
	c.stop()
	c.client.Disconnect(250)
}

// onClaim keeps the claim that holds for each task; the order of arrival
// decides between two devices.
func (c *Claims) onClaim(_ paho.Client, m paho.Message) {
	taskID := m.Topic()[strings.LastIndexByte(m.Topic(), '/')+1:]
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(m.Payload()) == 0 {
		delete(c.seen, taskID)
		return
	}
	var cl Claim
	if json.Unmarshal(m.Payload(), &cl) != nil || cl.TaskID != taskID || cl.Device == "" {
		return
	}
	now := time.Now()
	// A claim holds at most its state's TTL from when this device sees it,
	// whatever its expires says: a device user's claim that expires in
	// 2099 would otherwise stop the task for good.
	ttl := c.cfg.RunTTL
	if cl.State == ClaimDone {
		ttl = c.cfg.DoneTTL
	}
	if limit := now.Add(ttl); cl.Expires.After(limit) {
		cl.Expires = limit
	}
	prev, had := c.seen[taskID]
	holds := had && prev.Device != cl.Device && now.Before(prev.Expires)
	if ch, mine := c.pending[cl.Nonce]; mine && cl.Device == c.cfg.Device {
		delete(c.pending, cl.Nonce)
		if holds {
			ch <- claimWait{owner: prev.Device}
			restore := prev
			restore.Restore = true
			b, _ := json.Marshal(restore)
			c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), 1, true, b)
			return
		}
		c.seen[taskID] = cl
		ch <- claimWait{won: true, owner: cl.Device}
		return
	}
	if m.Retained() || cl.Restore || !holds {
		c.seen[taskID] = cl
	}
}

// ErrNoClaim is returned when the claim could not be made in time; the
// task is then left unacknowledged for the broker to deliver again.
var ErrNoClaim = errors.New("fleet: the claim could not be made")

// Claim claims taskID for this device. It returns the device that holds
// it, and whether that is this one.
func (c *Claims) Claim(ctx context.Context, taskID string) (owner string, mine bool, err error) {
	wait, cancelWait := context.WithTimeout(ctx, 30*time.Second)
	defer cancelWait()
	select {
	case <-c.ready:
	case <-wait.Done():
		return "", false, fmt.Errorf("%w: not subscribed to the claims: %v", ErrNoClaim, wait.Err())
	}
	nb := make([]byte, 8)
	_, _ = rand.Read(nb)
	cl := Claim{TaskID: taskID, Device: c.cfg.Device, State: ClaimRunning, Expires: time.Now().Add(c.cfg.RunTTL).UTC(),
		Nonce: hex.EncodeToString(nb)}
	ch := make(chan claimWait, 1)
	c.mu.Lock()
	if c.disabled {
		c.mu.Unlock()
		return c.cfg.Device, true, nil
	}
	if prev, ok := c.seen[taskID]; ok && time.Now().Before(prev.Expires) {
		c.mu.Unlock()
		return prev.Device, prev.Device == c.cfg.Device, nil
	}
	c.pending[cl.Nonce] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, cl.Nonce)
		c.mu.Unlock()
	}()
	b, _ := json.Marshal(cl)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := mqtt.WaitToken(ctx, c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), 1, true, b), 30*time.Second); err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrNoClaim, err)
	}
	select {
	case w := <-ch:
		return w.owner, w.won, nil
	case <-ctx.Done():
		return "", false, fmt.Errorf("%w: the broker did not send the claim back", ErrNoClaim)
	}
}

// Done marks the claim of a task this device ran as done, for DoneTTL.
func (c *Claims) Done(taskID string) {
	c.mu.Lock()
	cl, ok := c.seen[taskID]
	if !ok || cl.Device != c.cfg.Device || cl.State == ClaimDone {
		c.mu.Unlock()
		return
	}
	cl.State, cl.Expires, cl.Restore = ClaimDone, time.Now().Add(c.cfg.DoneTTL).UTC(), false
	c.seen[taskID] = cl
	c.mu.Unlock()
	b, _ := json.Marshal(cl)
	c.client.Publish(ClaimTopic(c.cfg.Prefix, taskID), 1, true, b)
}

// sweep clears, every minute, the retained claims of this device that
// expired.
func (c *Claims) sweep(ctx context.Context) {
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		var clear []string
		c.mu.Lock()
		for id, cl := range c.seen {
			if cl.Device == c.cfg.Device && !now.Before(cl.Expires) {
				clear = append(clear, id)
				delete(c.seen, id)
			}
		}
		c.mu.Unlock()
		for _, id := range clear {
			c.client.Publish(ClaimTopic(c.cfg.Prefix, id), 1, true, []byte{})
		}
	}
}
