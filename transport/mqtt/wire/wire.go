// Package wire is the project's own MQTT 3.1.1 codec: it reads a packet off
// a stream (ReadPacket), decodes a PUBLISH (DecodePublish), and encodes the
// packets a client sends (CONNECT, PUBLISH, PUBACK, SUBSCRIBE, UNSUBSCRIBE,
// PINGREQ, DISCONNECT), and does the login exchange on a connection it is
// handed (Login). It owns the bytes: no session, no goroutine. Two clients use it: the fleet's claims
// connection (transport/fleet) and an agent's task connection
// (transport/mqtt.Client); both say why they are not paho.
package wire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// MQTT 3.1.1 packet types.
const (
	Connect    = 1
	Connack    = 2
	Publish    = 3
	Puback     = 4
	Subscribe  = 8
	Suback     = 9
	Unsub      = 10
	Unsuback   = 11
	Pingreq    = 12
	Pingresp   = 13
	Disconnect = 14
)

// MaxLength is the largest remaining length MQTT can encode (four bytes).
const MaxLength = 268_435_455

// FlagTruncated marks, in the flags ReadPacket returns, a PUBLISH cut to
// the reader's limit (the fixed header's flags use the low four bits).
const FlagTruncated = 0x10

// ReadPacket reads one packet: its type, its flags and its body (into buf
// when it fits). A PUBLISH longer than max comes back cut to max, the rest
// of it read and dropped (its flags carry FlagTruncated, DecodePublish marks
// it Truncated); any other packet that long is an error.
func ReadPacket(r io.Reader, buf []byte, max int) (typ, flags byte, body []byte, err error) {
	var hdr [2]byte
	if _, err = io.ReadFull(r, hdr[:1]); err != nil {
		return 0, 0, nil, err
	}
	n, mult := 0, 1
	for i := 0; ; i++ {
		if _, err = io.ReadFull(r, hdr[1:]); err != nil {
			return 0, 0, nil, err
		}
		n += int(hdr[1]&0x7f) * mult
		if hdr[1]&0x80 == 0 {
			break
		}
		if i == 3 {
			return 0, 0, nil, errors.New("malformed remaining length from the broker")
		}
		mult <<= 7
	}
	typ, flags = hdr[0]>>4, hdr[0]&0x0f
	keep := n
	if n > max {
		if typ != Publish {
			return 0, 0, nil, fmt.Errorf("a packet of type %d and %d bytes from the broker", typ, n)
		}
		keep = max
	}
	if cap(buf) < keep {
		buf = make([]byte, keep)
	}
	body = buf[:keep]
	if _, err = io.ReadFull(r, body); err != nil {
		return 0, 0, nil, err
	}
	if n > keep {
		if _, err = io.CopyN(io.Discard, r, int64(n-keep)); err != nil {
			return 0, 0, nil, err
		}
		flags |= FlagTruncated
	}
	return typ, flags, body, nil
}

// InPublish is a PUBLISH from the broker. Payload points into the body
// ReadPacket returned.
type InPublish struct {
	Topic     string
	Payload   []byte
	ID        uint16
	QoS       byte
	Retained  bool
	Dup       bool
	Truncated bool
}

// DecodePublish decodes the body of a PUBLISH with the fixed header's
// flags.
func DecodePublish(flags byte, body []byte) (InPublish, error) {
	p := InPublish{QoS: (flags >> 1) & 3, Retained: flags&1 == 1, Dup: flags&8 != 0, Truncated: flags&FlagTruncated != 0}
	if p.QoS == 3 {
		return p, errors.New("a PUBLISH of QoS 3 from the broker")
	}
	if len(body) < 2 {
		return p, errors.New("a PUBLISH without a topic from the broker")
	}
	tl := int(binary.BigEndian.Uint16(body))
	rest := body[2:]
	if tl > len(rest) {
		return p, errors.New("a PUBLISH whose topic is longer than the packet from the broker")
	}
	p.Topic, rest = string(rest[:tl]), rest[tl:]
	if p.QoS > 0 {
		if len(rest) < 2 {
			return p, errors.New("a PUBLISH without its packet id from the broker")
		}
		p.ID, rest = binary.BigEndian.Uint16(rest), rest[2:]
	}
	p.Payload = rest
	return p, nil
}

// AppendLength appends an MQTT remaining length.
func AppendLength(b []byte, n int) []byte {
	for {
		d := byte(n & 0x7f)
		n >>= 7
		if n > 0 {
			d |= 0x80
		}
		b = append(b, d)
		if n == 0 {
			return b
		}
	}
}

// AppendString appends an MQTT UTF-8 string (length, then bytes).
func AppendString(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint16(b, uint16(len(s))), s...)
}

// ConnectOptions are the fields of a CONNECT.
type ConnectOptions struct {
	ClientID     string
	User, Pass   string // no user: neither is sent
	KeepAlive    time.Duration
	CleanSession bool
	// Will, when WillTopic is set: the broker publishes WillPayload there
	// when the connection ends without a DISCONNECT.
	WillTopic   string
	WillPayload []byte
	WillQoS     byte
	WillRetain  bool
}

// EncodeConnect encodes a CONNECT of protocol level 4 (MQTT 3.1.1).
func EncodeConnect(o ConnectOptions) []byte {
	var flags byte
	if o.CleanSession {
		flags |= 0x02
	}
	n := 10 + 2 + len(o.ClientID)
	if o.WillTopic != "" {
		flags |= 0x04 | (o.WillQoS&3)<<3
		if o.WillRetain {
			flags |= 0x20
		}
		n += 2 + len(o.WillTopic) + 2 + len(o.WillPayload)
	}
	if o.User != "" {
		flags |= 0x80 | 0x40
		n += 2 + len(o.User) + 2 + len(o.Pass)
	}
	b := AppendLength(append(make([]byte, 0, n+5), Connect<<4), n)
	b = AppendString(b, "MQTT")
	b = append(b, 4, flags)
	b = binary.BigEndian.AppendUint16(b, uint16(o.KeepAlive/time.Second))
	b = AppendString(b, o.ClientID)
	if o.WillTopic != "" {
		b = AppendString(b, o.WillTopic)
		b = binary.BigEndian.AppendUint16(b, uint16(len(o.WillPayload)))
		b = append(b, o.WillPayload...)
	}
	if o.User != "" {
		b = AppendString(b, o.User)
		b = AppendString(b, o.Pass)
	}
	return b
}

// AppendPublish appends a PUBLISH; id is left out at QoS 0, and dup is the
// DUP flag of a QoS 1 publication sent again.
func AppendPublish(b []byte, topic string, payload []byte, qos byte, id uint16, retain, dup bool) []byte {
	h := byte(Publish<<4) | (qos&3)<<1
	if retain {
		h |= 1
	}
	if dup && qos > 0 {
		h |= 8
	}
	n := 2 + len(topic) + len(payload)
	if qos > 0 {
		n += 2
	}
	b = AppendLength(append(b, h), n)
	b = AppendString(b, topic)
	if qos > 0 {
		b = binary.BigEndian.AppendUint16(b, id)
	}
	return append(b, payload...)
}

// EncodePublish encodes a PUBLISH of QoS 1 with packet id id.
func EncodePublish(topic string, payload []byte, id uint16, retain bool) []byte {
	return AppendPublish(make([]byte, 0, len(topic)+len(payload)+9), topic, payload, 1, id, retain, false)
}

// AppendPuback appends the PUBACK of packet id id.
func AppendPuback(b []byte, id uint16) []byte {
	return append(b, Puback<<4, 2, byte(id>>8), byte(id))
}

// EncodeSubscribe encodes a SUBSCRIBE of filters, each at its QoS.
func EncodeSubscribe(id uint16, filters []string, qos []byte) []byte {
	n := 2
	for _, f := range filters {
		n += 2 + len(f) + 1
	}
	b := AppendLength([]byte{Subscribe<<4 | 2}, n)
	b = binary.BigEndian.AppendUint16(b, id)
	for i, f := range filters {
		b = append(AppendString(b, f), qos[i])
	}
	return b
}

// EncodeUnsubscribe encodes an UNSUBSCRIBE of topics.
func EncodeUnsubscribe(id uint16, topics []string) []byte {
	n := 2
	for _, t := range topics {
		n += 2 + len(t)
	}
	b := AppendLength([]byte{Unsub<<4 | 2}, n)
	b = binary.BigEndian.AppendUint16(b, id)
	for _, t := range topics {
		b = AppendString(b, t)
	}
	return b
}

// PingreqPacket and DisconnectPacket are the two packets without a body a
// client sends.
var (
	PingreqPacket    = []byte{Pingreq << 4, 0}
	DisconnectPacket = []byte{Disconnect << 4, 0}
)

// ConnackReason names an MQTT 3.1.1 CONNACK return code.
func ConnackReason(code byte) string {
	switch code {
	case 1:
		return "unacceptable protocol version"
	case 2:
		return "client identifier rejected"
	case 3:
		return "server unavailable"
	case 4:
		return "bad user name or password"
	case 5:
		return "not authorised"
	}
	return fmt.Sprintf("return code %d", code)
}

// Connack return codes a client acts on.
const (
	RefusedProtocol    = 1
	RefusedIdentifier  = 2
	RefusedUnavailable = 3
	RefusedCredentials = 4
	RefusedNotAuthed   = 5
)

// Login sends CONNECT on conn and reads the CONNACK, all within timeout
// (the deadline is cleared after); r reads what follows, through a buffer
// of size bytes. code is the CONNACK's return code when the broker refused
// the login (err then says why); conn is left open either way.
func Login(conn net.Conn, o ConnectOptions, timeout time.Duration, size int) (r *bufio.Reader, code byte, err error) {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if _, err = conn.Write(EncodeConnect(o)); err != nil {
		return nil, 0, err
	}
	r = bufio.NewReaderSize(conn, size)
	typ, _, body, err := ReadPacket(r, nil, 64)
	switch {
	case err != nil:
		return nil, 0, err
	case typ != Connack || len(body) != 2:
		return nil, 0, fmt.Errorf("the broker answered CONNECT with packet type %d", typ)
	case body[1] != 0:
		return nil, body[1], fmt.Errorf("the broker refused the connection: %s", ConnackReason(body[1]))
	}
	_ = conn.SetDeadline(time.Time{})
	return r, 0, nil
}
