package mqtt5

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// fakeHub serves one connection with answer: the bytes it writes after
// reading the CONNECT (and, when pubAnswer is set, those after the
// PUBLISH). A hub that refuses MQTT 5 cannot be had from Mosquitto or the
// embedded broker, which both speak it; transport/mqtt's TestPublishReported
// runs the real Mosquitto.
func fakeHub(t *testing.T, connAnswer, pubAnswer []byte) func(context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	go func() {
		defer server.Close()
		if _, err := ReadPacket(server); err != nil {
			return
		}
		if _, err := server.Write(connAnswer); err != nil || pubAnswer == nil {
			return
		}
		if _, err := ReadPacket(server); err != nil {
			return
		}
		_, _ = server.Write(pubAnswer)
		_, _ = io.Copy(io.Discard, server)
	}()
	return func(context.Context) (net.Conn, error) { return client, nil }
}

func TestPublish(t *testing.T) {
	connack5 := []byte{0x20, 0x03, 0x00, 0x00, 0x00}
	for _, tc := range []struct {
		name             string
		conn, pub        []byte
		want             Result
		notMQTT5, failed bool
	}{
		{name: "taken", conn: connack5, pub: []byte{0x40, 0x02, 0x00, 0x01}, want: Result{Code: 0}},
		{name: "not authorized", conn: connack5, pub: []byte{0x40, 0x03, 0x00, 0x01, 0x87}, want: Result{Code: 0x87}},
		{name: "reason string", conn: connack5, pub: []byte{0x40, 0x0a, 0x00, 0x01, 0x97, 0x06, 0x1f, 0x00, 0x03, 'f', 'u', 'l'},
			want: Result{Code: 0x97, Reason: "ful"}},
		{name: "user property, then reason string", conn: connack5,
			pub:  []byte{0x40, 0x10, 0x00, 0x01, 0x87, 0x0c, 0x26, 0x00, 0x01, 'k', 0x00, 0x01, 'v', 0x1f, 0x00, 0x02, 'n', 'o'},
			want: Result{Code: 0x87, Reason: "no"}},
		{name: "disconnected", conn: connack5, pub: []byte{0xe0, 0x01, 0x87}, want: Result{Code: 0x87, Disconnected: true}},
		{name: "closed before the PUBACK", conn: connack5, pub: []byte{}, failed: true},
		{name: "MQTT 3.1.1 hub", conn: []byte{0x20, 0x02, 0x00, 0x01}, notMQTT5: true},
		{name: "unsupported protocol version", conn: []byte{0x20, 0x03, 0x00, 0x84, 0x00}, notMQTT5: true},
		{name: "closed at once", conn: []byte{}, notMQTT5: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Publish(context.Background(), Options{Dial: fakeHub(t, tc.conn, tc.pub), ClientID: "c", Timeout: 5 * time.Second},
				"openstarry/x/commands/status", []byte("{}"))
			switch {
			case tc.notMQTT5:
				if !errors.Is(err, ErrNotMQTT5) {
					t.Fatalf("%v %v, want ErrNotMQTT5", res, err)
				}
			case tc.failed:
				if err == nil || errors.Is(err, ErrNotMQTT5) {
					t.Fatalf("%v %v, want an error other than ErrNotMQTT5", res, err)
				}
			case err != nil || res != tc.want:
				t.Fatalf("%+v %v, want %+v", res, err, tc.want)
			}
		})
	}
	if s := (Result{Code: 0x87}).String(); s != "0x87 (not authorized)" {
		t.Fatal(s)
	}
}

// TestReadPacketBound: a packet longer than MaxPacket is refused before it
// is read.
func TestReadPacketBound(t *testing.T) {
	_, err := ReadPacket(bytes.NewReader([]byte{0x40, 0xff, 0xff, 0xff, 0x7f}))
	if err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatal(err)
	}
}

// FuzzReadPacket: whatever a hub sends, ReadPacket returns a packet or an
// error, never panics, and reads no more than MaxPacket of a body.
func FuzzReadPacket(f *testing.F) {
	for _, s := range [][]byte{
		{0x20, 0x03, 0x00, 0x00, 0x00},
		{0x20, 0x02, 0x00, 0x01},
		{0x40, 0x03, 0x00, 0x01, 0x87},
		{0x40, 0x0a, 0x00, 0x01, 0x97, 0x06, 0x1f, 0x00, 0x03, 'f', 'u', 'l'},
		{0xe0, 0x01, 0x87},
		{0x20, 0x09, 0x00, 0x00, 0x06, 0x27, 0x00, 0x00, 0x10, 0x00, 0x00},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ReadPacket(bytes.NewReader(b))
		if err == nil && len(p.Reason) > len(b) {
			t.Fatalf("a reason string longer than the packet: %+v", p)
		}
	})
}
