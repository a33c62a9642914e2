package mqtt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
)

// ErrPublishRefused is returned when the hub acknowledged a publication but
// did not deliver it: its ACL refused it. An MQTT 3.1.1 client (paho's,
// this one) is never told: Mosquitto acknowledges a QoS 1 PUBLISH it drops
// for its ACL as if it had taken it.
var ErrPublishRefused = errors.New("the hub refused the publication")

// PublishRefusedError names the topic and the user refused.
type PublishRefusedError struct {
	Topic, User string
}

func (e *PublishRefusedError) Error() string {
	return fmt.Sprintf("the hub refused the publication to %s: it acknowledged it and delivered it to no one, which is what a hub does with what its ACL forbids (it tells an MQTT 3.1.1 client nothing more); give %s write access to it (on a Mosquitto dynamic security hub: openstarry hub operator add NAME; docs/fleet.md)",
		e.Topic, userName(e.User))
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
	return fmt.Sprintf("or the hub may have refused the publication: a hub drops what its ACL forbids without telling an MQTT 3.1.1 client, and %s may not subscribe to %s to check; it needs write access to it (on a Mosquitto dynamic security hub: openstarry hub operator add NAME)",
		userName(user), topic)
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
