package mqtt_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestPublishReported: a real Mosquitto whose ACL lets anonymous clients
// read openstarry/# and write only openstarry/ok. Over MQTT 5, a refused
// publication is reported at once with the PUBACK's reason code, 0x87 (not
// authorized), and an allowed one is taken. Through a front that refuses
// MQTT 5 as an MQTT 3.1.1 hub does (CONNACK return code 0x01), the same
// refusal is found by the echo check, and says that the hub does not
// accept MQTT 5.
func TestPublishReported(t *testing.T) {
	acl := filepath.Join(t.TempDir(), "acl")
	if err := os.WriteFile(acl, []byte("topic read openstarry/#\ntopic write openstarry/ok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := mqtttest.StartMosquitto(t, mqtttest.Options{Extra: []string{"acl_file " + acl}})
	col := mqtttest.Collect(t, m.URL(), "reported", true, "openstarry/#")
	send := func(broker, topic string) (bool, error) {
		pc, err := mqtt.Dial(context.Background(), mqtt.DialOptions{Broker: broker, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer pc.Disconnect(0)
		return mqtt.PublishReported(context.Background(), mqtt.DialOptions{Broker: broker}, pc, topic, []byte("m-"+topic), 6*time.Second)
	}

	verified, err := send(m.URL(), "openstarry/denied")
	var re *mqtt.PublishRefusedError
	if !errors.As(err, &re) || re.MQTT5 == nil || re.MQTT5.Code != 0x87 || !errors.Is(err, mqtt.ErrPublishRefused) ||
		!strings.Contains(err.Error(), "the hub refused the publication to openstarry/denied: MQTT 5 reason code 0x87 (not authorized); give this client (no user name) write access to it") {
		t.Fatalf("MQTT 5, refused: verified %v, %v", verified, err)
	}
	if verified, err = send(m.URL(), "openstarry/ok"); err != nil || !verified {
		t.Fatalf("MQTT 5, allowed: verified %v, %v", verified, err)
	}
	front := refuseMQTT5(t, strings.TrimPrefix(m.URL(), "tcp://"))
	verified, err = send(front, "openstarry/denied")
	if !errors.As(err, &re) || re.MQTT5 != nil ||
		!strings.Contains(err.Error(), "it acknowledged it and delivered it to no one") || !strings.Contains(err.Error(), "this hub does not accept MQTT 5") {
		t.Fatalf("MQTT 3.1.1, refused: verified %v, %v", verified, err)
	}
	if verified, err = send(front, "openstarry/ok"); err != nil || !verified {
		t.Fatalf("MQTT 3.1.1, allowed: verified %v, %v", verified, err)
	}
	// The collector is a client of its own: what the hub delivered to the
	// publisher may still be on its way to it.
	wait.For(t, 10*time.Second, "the two allowed publications at the collector", func() bool {
		return len(col.Messages("openstarry/ok")) >= 2
	})
	if n := len(col.Messages("openstarry/ok")); n != 2 {
		t.Fatalf("the allowed publications: %d delivered, want 2 (once each way)", n)
	}
	if n := len(col.Messages("openstarry/denied")); n != 0 {
		t.Fatalf("the refused publications: %d delivered", n)
	}
}

// refuseMQTT5 is a front for the broker at addr that answers an MQTT 5
// CONNECT as an MQTT 3.1.1 hub does (CONNACK, return code 0x01:
// unacceptable protocol version) and relays every other connection. It
// returns its tcp:// URL. (Mosquitto and the embedded broker both speak MQTT
// 5: this is the hub that does not.)
func refuseMQTT5(t *testing.T, addr string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				head, err := mqtttest.ReadPacket(r)
				if err != nil {
					return
				}
				// CONNECT: fixed header, remaining length, then the
				// protocol name (2 + 4 bytes) and its level.
				body := head[len(head)-remaining(head):]
				if len(body) > 6 && body[6] == 5 {
					_, _ = c.Write([]byte{0x20, 0x02, 0x00, 0x01})
					return
				}
				b, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer b.Close()
				if _, err := b.Write(head); err != nil {
					return
				}
				go func() { _, _ = io.Copy(c, b); c.Close() }()
				_, _ = io.Copy(b, r)
			}()
		}
	}()
	return "tcp://" + l.Addr().String()
}

// remaining returns the remaining length of a packet read by mqtttest.ReadPacket.
func remaining(p []byte) int {
	n, mult := 0, 1
	for _, b := range p[1:] {
		n += int(b&0x7f) * mult
		mult *= 128
		if b&0x80 == 0 {
			break
		}
	}
	return n
}
