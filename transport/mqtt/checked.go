package mqtt

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtt5"
)

// ErrPublishRefused is returned when the hub refused a publication: in
// the reason code of its MQTT 5 PUBACK, or, to an MQTT 3.1.1 client
// (paho's, this one), by acknowledging it and delivering it to no one,
// which is what Mosquitto does with a QoS 1 PUBLISH its ACL forbids.
var ErrPublishRefused = errors.New("the hub refused the publication")

// PublishRefusedError names the topic and the user refused, and the MQTT
// 5 reason code when the hub gave one.
type PublishRefusedError struct {
	Topic, User string
	// MQTT5 is the hub's answer over MQTT 5; nil when the refusal was
	// seen over MQTT 3.1.1 (the publication never came back).
	MQTT5 *mqtt5.Result
}

func (e *PublishRefusedError) Error() string {
	fix := fmt.Sprintf("give %s write access to it (on a Mosquitto dynamic security hub: openstarry hub operator add NAME; docs/fleet.md)", userName(e.User))
	if e.MQTT5 != nil {
		if e.MQTT5.Code != 0x87 && e.MQTT5.Code != 0x80 {
			return fmt.Sprintf("the hub refused the publication to %s: MQTT 5 reason code %s", e.Topic, e.MQTT5)
		}
		return fmt.Sprintf("the hub refused the publication to %s: MQTT 5 reason code %s; %s", e.Topic, e.MQTT5, fix)
	}
	return fmt.Sprintf("the hub refused the publication to %s: it acknowledged it and delivered it to no one, which is what a hub does with what its ACL forbids (this hub does not accept MQTT 5, whose PUBACK would say why; it tells an MQTT 3.1.1 client nothing more); %s",
		e.Topic, fix)
}

// Is makes errors.Is(err, ErrPublishRefused) hold.
func (e *PublishRefusedError) Is(target error) bool { return target == ErrPublishRefused }

func userName(u string) string {
	if u == "" {
		return "this client (no user name)"
	}
	return fmt.Sprintf("user %q", u)
}

// UnverifiedHint is what to add to a timeout when PublishChecked could not
// check the publication.
func UnverifiedHint(topic, user string) string {
	return fmt.Sprintf("or the hub may have refused the publication: it does not accept MQTT 5, whose PUBACK would say so, it drops what its ACL forbids without telling an MQTT 3.1.1 client, and %s may not subscribe to %s to check; it needs write access to it (on a Mosquitto dynamic security hub: openstarry hub operator add NAME)",
		userName(user), topic)
}

// PublishReported publishes payload (QoS 1, not retained) to topic and
// reports whether the hub refused it. Where the hub speaks MQTT 5, the
// publication goes over a connection of its own, MQTT 5 (mqtt5.Publish),
// and the PUBACK's reason code says it: 0x80 and above is a
// PublishRefusedError carrying the code. Where the hub does not accept an
// MQTT 5 connection, nothing was published that way, and the publication
// goes over pc as PublishChecked sends it. verified false: the refusal
// could not be checked (UnverifiedHint).
func PublishReported(ctx context.Context, dial DialOptions, pc paho.Client, topic string, payload []byte, timeout time.Duration) (verified bool, err error) {
	res, err := publish5(ctx, dial, topic, payload, timeout)
	switch {
	case err == nil && res.Refused():
		return true, &PublishRefusedError{Topic: topic, User: dial.Username, MQTT5: &res}
	case err == nil:
		return true, nil
	case !errors.Is(err, mqtt5.ErrNotMQTT5):
		return false, err // sent, and unknown whether the hub took it
	}
	return PublishChecked(ctx, pc, topic, payload, dial.Username, timeout)
}

// publish5 publishes over MQTT 5 with dial's broker and credentials, on a
// client id of its own (openstarry-cli-{random}-pub5: the 3.1.1 connection
// beside it keeps its own).
func publish5(ctx context.Context, dial DialOptions, topic string, payload []byte, timeout time.Duration) (mqtt5.Result, error) {
	u, secure, err := ParseBrokerURL(dial.Broker)
	if err != nil {
		return mqtt5.Result{}, err
	}
	tc, err := TLSConfig(u, secure, dial.CAFile, dial.CertFile, dial.KeyFile)
	if err != nil {
		return mqtt5.Result{}, err
	}
	id := make([]byte, 6)
	_, _ = rand.Read(id)
	return mqtt5.Publish(ctx, mqtt5.Options{
		Dial: func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", u.Host)
			if err != nil || tc == nil {
				return c, err
			}
			tlc := tls.Client(c, tc)
			if err := tlc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tlc, nil
		},
		ClientID: "openstarry-cli-" + hex.EncodeToString(id) + "-pub5",
		Username: dial.Username, Password: dial.Password,
		Timeout: min(max(timeout/3, 2*time.Second), 10*time.Second),
	}, topic, payload)
}

// PublishChecked publishes payload (QoS 1, not retained) to topic and checks
// that the hub delivers it: it subscribes to topic first and waits for the
// payload to come back, up to a third of timeout (2 s to 10 s). It returns
// a PublishRefusedError when the hub acknowledged the publication and did
// not deliver it, and verified false when the hub refused the subscription
// (then nothing is known; UnverifiedHint says so).
func PublishChecked(ctx context.Context, pc paho.Client, topic string, payload []byte, user string, timeout time.Duration) (verified bool, err error) {
	echo := make(chan struct{}, 1)
	tok := pc.Subscribe(topic, 1, func(_ paho.Client, m paho.Message) {
		if !m.Retained() && bytes.Equal(m.Payload(), payload) {
			select {
			case echo <- struct{}{}:
			default:
			}
		}
	})
	if err := waitToken(ctx, tok, timeout); err != nil {
		return false, fmt.Errorf("mqtt: subscribe %s: %w", topic, err)
	}
	if st, ok := tok.(*paho.SubscribeToken); ok && st.Result()[topic] > 2 {
		verified = false // refused: publish unchecked
	} else {
		verified = true
		defer pc.Unsubscribe(topic)
	}
	if err := waitToken(ctx, pc.Publish(topic, 1, false, payload), timeout); err != nil {
		return verified, fmt.Errorf("mqtt: publish to %s: %w", topic, err)
	}
	if !verified {
		return false, nil
	}
	wait := min(max(timeout/3, 2*time.Second), 10*time.Second)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-echo:
		return true, nil
	case <-t.C:
		return true, &PublishRefusedError{Topic: topic, User: user}
	case <-ctx.Done():
		return true, ctx.Err()
	}
}
