package wire

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// maxPacket is the reading limit of these tests (the fleet's claims read
// with this one).
const maxPacket = 64 << 10

// TestPublishRoundTrip: what EncodePublish writes, ReadPacket and
// DecodePublish read back, across the one-, two- and three-byte remaining
// lengths; a PUBLISH longer than maxPacket comes back truncated, the rest
// of it read past, and the packet behind it intact.
func TestPublishRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 100, 126, 127, 128, 300, 16383, 16384, 20000, maxPacket + 10} {
		payload := bytes.Repeat([]byte{'x'}, n)
		var stream bytes.Buffer
		stream.Write(EncodePublish("openstarry/fleet/claims/t-1", payload, 7, true))
		stream.Write([]byte{Pingresp << 4, 0})
		r := bufio.NewReader(&stream)
		typ, flags, body, err := ReadPacket(r, nil, maxPacket)
		if err != nil || typ != Publish {
			t.Fatalf("%d bytes: type %d, %v", n, typ, err)
		}
		p, err := DecodePublish(flags, body)
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if p.Topic != "openstarry/fleet/claims/t-1" || p.ID != 7 || p.QoS != 1 || !p.Retained {
			t.Fatalf("%d bytes: %+v", n, p)
		}
		if want := n + 2 + len(p.Topic) + 2; want > maxPacket {
			if !p.Truncated {
				t.Fatalf("%d bytes: not marked truncated", n)
			}
		} else if p.Truncated || !bytes.Equal(p.Payload, payload) {
			t.Fatalf("%d bytes: payload of %d bytes back, truncated %v", n, len(p.Payload), p.Truncated)
		}
		if typ, _, _, err := ReadPacket(r, nil, maxPacket); err != nil || typ != Pingresp {
			t.Fatalf("%d bytes: the packet behind: type %d, %v", n, typ, err)
		}
	}
}

// TestReadPacketRejects: malformed input from the broker is an error (the
// connection is then dropped and made again), never a panic or a packet.
func TestReadPacketRejects(t *testing.T) {
	for name, in := range map[string][]byte{
		"length of five bytes":    {Publish << 4, 0xff, 0xff, 0xff, 0xff, 0x01},
		"SUBACK beyond maxPacket": append([]byte{Suback << 4}, AppendLength(nil, maxPacket+1)...),
		"cut short":               {Puback << 4, 2, 0},
	} {
		if _, _, _, err := ReadPacket(bytes.NewReader(in), nil, maxPacket); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	for name, body := range map[string][]byte{
		"no topic length":       {0},
		"topic beyond the body": {0, 9, 'a'},
		"no packet id":          {0, 1, 'a', 0},
	} {
		if _, err := DecodePublish(1<<1, body); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := DecodePublish(3<<1, []byte{0, 1, 'a', 0, 1}); err == nil {
		t.Error("QoS 3: no error")
	}
}

// FuzzReadPacket: ReadPacket and DecodePublish on any bytes the broker could
// send.
func FuzzReadPacket(f *testing.F) {
	f.Add(EncodePublish("openstarry/fleet/claims/t", []byte(`{"task_id":"t"}`), 1, true))
	f.Add([]byte{Suback << 4, 3, 0, 1, 0x80})
	f.Add([]byte{Publish<<4 | 1, 0xff, 0xff, 0x03})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			typ, flags, body, err := ReadPacket(r, nil, maxPacket)
			if err != nil {
				return
			}
			if len(body) > maxPacket {
				t.Fatalf("a body of %d bytes", len(body))
			}
			if typ == Publish {
				_, _ = DecodePublish(flags, body)
			}
		}
	})
}

// TestEncodeConnect: another implementation (the embedded broker's codec,
// mochi's) reads back every field of a CONNECT: an agent's (persistent
// session, last will, login) and the claims' (clean, no will, no login).
func TestEncodeConnect(t *testing.T) {
	for name, o := range map[string]ConnectOptions{
		"agent": {ClientID: "openstarry-dev1-a1", User: "dev1", Pass: "secret", KeepAlive: 30 * time.Second,
			WillTopic: "openstarry/dev1/status", WillPayload: []byte(`{"state":"offline"}`), WillQoS: 1, WillRetain: true},
		"claims": {ClientID: "openstarry-dev1-a1-claims", KeepAlive: 15 * time.Second, CleanSession: true},
	} {
		typ, _, body, err := ReadPacket(bytes.NewReader(EncodeConnect(o)), nil, maxPacket)
		if err != nil || typ != Connect {
			t.Fatalf("%s: type %d, %v", name, typ, err)
		}
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}}
		if err := pk.ConnectDecode(body); err != nil {
			t.Fatalf("%s: mochi: %v", name, err)
		}
		c := pk.Connect
		if pk.ProtocolVersion != 4 || string(c.ProtocolName) != "MQTT" || c.ClientIdentifier != o.ClientID ||
			c.Clean != o.CleanSession || c.Keepalive != uint16(o.KeepAlive/time.Second) ||
			c.UsernameFlag != (o.User != "") || string(c.Username) != o.User || string(c.Password) != o.Pass ||
			c.WillFlag != (o.WillTopic != "") || c.WillTopic != o.WillTopic || !bytes.Equal(c.WillPayload, o.WillPayload) ||
			c.WillQos != o.WillQoS || c.WillRetain != o.WillRetain {
			t.Errorf("%s: mochi read %+v (version %d) from %+v", name, c, pk.ProtocolVersion, o)
		}
	}
}

// TestAppendPublish: a PUBLISH at QoS 0 (no packet id) and a QoS 1
// publication sent again (DUP), read back by DecodePublish and by mochi's
// codec.
func TestAppendPublish(t *testing.T) {
	for _, c := range []struct {
		qos      byte
		id       uint16
		dup, ret bool
	}{{0, 0, false, false}, {1, 9, false, true}, {1, 65535, true, false}} {
		b := AppendPublish([]byte{Pingresp << 4, 0}, "a/b", []byte("payload"), c.qos, c.id, c.ret, c.dup)
		r := bytes.NewReader(b)
		if typ, _, _, err := ReadPacket(r, nil, maxPacket); err != nil || typ != Pingresp {
			t.Fatalf("%+v: what was there before: type %d, %v", c, typ, err)
		}
		typ, flags, body, err := ReadPacket(r, nil, maxPacket)
		if err != nil || typ != Publish {
			t.Fatalf("%+v: type %d, %v", c, typ, err)
		}
		p, err := DecodePublish(flags, body)
		if err != nil || p.Topic != "a/b" || string(p.Payload) != "payload" || p.QoS != c.qos || p.ID != c.id || p.Dup != c.dup || p.Retained != c.ret {
			t.Errorf("%+v: %+v, %v", c, p, err)
		}
		var fh packets.FixedHeader
		if err := fh.Decode(b[2]); err != nil {
			t.Fatal(err)
		}
		fh.Remaining = len(body)
		pk := packets.Packet{FixedHeader: fh, ProtocolVersion: 4}
		if err := pk.PublishDecode(body); err != nil || pk.TopicName != "a/b" || string(pk.Payload) != "payload" ||
			pk.FixedHeader.Qos != c.qos || pk.PacketID != c.id || pk.FixedHeader.Dup != c.dup || pk.FixedHeader.Retain != c.ret {
			t.Errorf("%+v: mochi read %+v, %v", c, pk, err)
		}
	}
}
