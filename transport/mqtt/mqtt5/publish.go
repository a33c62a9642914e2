// Package mqtt5 publishes one message over MQTT 5 to learn the hub's answer
// to it: the reason code of its PUBACK. It owns that one exchange (CONNECT,
// CONNACK, PUBLISH at QoS 1, PUBACK, DISCONNECT) and nothing else; the
// project's MQTT client (paho.mqtt.golang) speaks MQTT 3.1.1 only, and a
// hub tells a 3.1.1 client nothing when its ACL drops a publication: it
// acknowledges it as if it had taken it. An MQTT 5 hub answers PUBACK 0x87
// (Not authorized) instead (Mosquitto 2.0: handle__publish sets
// MQTT_RC_NOT_AUTHORIZED and sends it in the PUBACK).
//
// The five packets are encoded and decoded here, by hand, rather than by
// github.com/eclipse/paho.golang's packets package, the Eclipse project's
// MQTT 5 codec, which was tried first. Measured with build.sh's flags
// (-trimpath -ldflags "-s -w") against the same tree without this
// package: paho.golang's packets, linked for this exchange alone, added
// 108 KiB to every binary (linux/amd64 16.86 → 16.96 MiB, windows/amd64
// 17.02 → 17.13 MiB) and put the small linux/armv6 build over its 11 MiB
// budget (10.97 → 11.07 MiB), since its decoder names every packet type
// and property; the code here adds 24 KiB (small linux/armv6 10.99 MiB).
// What is read from the hub is bounded (MaxPacket) and fuzzed
// (FuzzReadPacket); the exchange is tested against a real Mosquitto in
// transport/mqtt (TestPublishReported).
package mqtt5

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// MaxPacket bounds a packet read from the hub (a CONNACK with its
// properties, a PUBACK, a DISCONNECT); a longer one is an error.
const MaxPacket = 64 << 10

// ErrNotMQTT5 is returned when the hub did not accept an MQTT 5 connection
// (it answered as an MQTT 3.1.1 hub, refused the protocol version, refused
// the connection, or closed it): nothing was published, and the caller
// may publish another way.
var ErrNotMQTT5 = errors.New("the hub did not accept an MQTT 5 connection")

// Options say how to reach the hub.
type Options struct {
	// Dial opens the connection (TCP, or TLS over it); the deadline of
	// ctx bounds it.
	Dial               func(ctx context.Context) (net.Conn, error)
	ClientID           string
	Username, Password string
	// Timeout bounds the whole exchange; default 10s.
	Timeout time.Duration
}

// Result is the hub's answer to the publication.
type Result struct {
	// Code is the PUBACK's reason code (0x00 success, 0x10 no matching
	// subscribers; 0x80 and above: refused), or the reason code of the
	// DISCONNECT the hub sent instead of a PUBACK.
	Code byte
	// Reason is the hub's reason string, when it sent one.
	Reason string
	// Disconnected says that Code came in a DISCONNECT.
	Disconnected bool
}

// Refused reports whether the hub refused the publication.
func (r Result) Refused() bool { return r.Code >= 0x80 }

// String names the code: "0x87 (not authorized)".
func (r Result) String() string {
	s := fmt.Sprintf("0x%02x (%s)", r.Code, ReasonName(r.Code))
	if r.Reason != "" {
		s += ": " + r.Reason
	}
	return s
}

// ReasonName names an MQTT 5 PUBACK or DISCONNECT reason code as the
// specification does (section 3.4.2.1 and 3.14.2.1), in lower case.
func ReasonName(code byte) string {
	switch code {
	case 0x00:
		return "success"
	case 0x10:
		return "no matching subscribers"
	case 0x80:
		return "unspecified error"
	case 0x81:
		return "malformed packet"
	case 0x82:
		return "protocol error"
	case 0x83:
		return "implementation specific error"
	case 0x87:
		return "not authorized"
	case 0x89:
		return "server busy"
	case 0x8B:
		return "server shutting down"
	case 0x90:
		return "topic name invalid"
	case 0x91:
		return "packet identifier in use"
	case 0x93:
		return "receive maximum exceeded"
	case 0x95:
		return "packet too large"
	case 0x97:
		return "quota exceeded"
	case 0x99:
		return "payload format invalid"
	case 0x9A:
		return "retain not supported"
	case 0x9B:
		return "QoS not supported"
	}
	return "unknown reason code"
}

// Packet types (the high nibble of a packet's first byte).
const (
	typeConnect    = 1
	typeConnack    = 2
	typePublish    = 3
	typePuback     = 4
	typeDisconnect = 14
)

// Packet is a packet read from the hub: its type and, for CONNACK, PUBACK
// and DISCONNECT, what this package uses of it.
type Packet struct {
	Type     byte
	Code     byte   // the reason code (CONNACK, PUBACK, DISCONNECT)
	PacketID uint16 // PUBACK
	Reason   string // the Reason String property, when sent
}

// Publish connects to the hub with MQTT 5 (clean start, no session kept),
// publishes payload to topic at QoS 1, not retained, and returns the
// hub's answer. An error that wraps ErrNotMQTT5 means that nothing was
// published; any other error leaves it unknown whether the hub took it.
func Publish(ctx context.Context, o Options, topic string, payload []byte) (Result, error) {
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	conn, err := o.Dial(ctx)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotMQTT5, err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	r := bufio.NewReader(conn)

	keepAlive := uint16(min(max(o.Timeout/time.Second, 1)*2, 600))
	if _, err := conn.Write(connectPacket(o.ClientID, o.Username, o.Password, keepAlive)); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotMQTT5, err)
	}
	ack, err := ReadPacket(r)
	if err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrNotMQTT5, err)
	}
	if ack.Type != typeConnack {
		return Result{}, fmt.Errorf("%w: it answered the CONNECT with a packet of type %d", ErrNotMQTT5, ack.Type)
	}
	if ack.Code != 0 {
		return Result{}, fmt.Errorf("%w: CONNACK reason code 0x%02x", ErrNotMQTT5, ack.Code)
	}

	const id = 1
	if _, err := conn.Write(publishPacket(topic, id, payload)); err != nil {
		return Result{}, fmt.Errorf("mqtt5: publish to %s: %w", topic, err)
	}
	for {
		p, err := ReadPacket(r)
		if err != nil {
			return Result{}, fmt.Errorf("mqtt5: no PUBACK for the publication to %s: %w", topic, err)
		}
		switch {
		case p.Type == typePuback && p.PacketID == id:
			_, _ = conn.Write([]byte{typeDisconnect << 4, 1, 0}) // normal disconnection
			return Result{Code: p.Code, Reason: p.Reason}, nil
		case p.Type == typeDisconnect:
			res := Result{Code: p.Code, Reason: p.Reason, Disconnected: true}
			if !res.Refused() {
				return Result{}, fmt.Errorf("mqtt5: the hub disconnected (reason code 0x%02x) before it acknowledged the publication to %s", p.Code, topic)
			}
			return res, nil
		}
		// Anything else (an AUTH, a PUBLISH) is not the answer: read on.
	}
}

// connectPacket is an MQTT 5 CONNECT: clean start, no will, no
// properties (section 3.1).
func connectPacket(clientID, user, password string, keepAlive uint16) []byte {
	flags := byte(0x02) // clean start
	var payload []byte
	payload = appendString(payload, clientID)
	if user != "" {
		flags |= 0x80
		payload = appendString(payload, user)
	}
	if password != "" {
		flags |= 0x40
		payload = appendString(payload, password)
	}
	vh := appendString(nil, "MQTT")
	vh = append(vh, 5, flags)
	vh = binary.BigEndian.AppendUint16(vh, keepAlive)
	vh = append(vh, 0) // no properties
	return packet(typeConnect<<4, append(vh, payload...))
}

// publishPacket is an MQTT 5 PUBLISH at QoS 1, not retained, without
// properties (section 3.3).
func publishPacket(topic string, id uint16, payload []byte) []byte {
	b := appendString(nil, topic)
	b = binary.BigEndian.AppendUint16(b, id)
	b = append(b, 0) // no properties
	return packet(typePublish<<4|1<<1, append(b, payload...))
}

// packet prefixes body with the fixed header: first byte, remaining length.
func packet(first byte, body []byte) []byte {
	out := []byte{first}
	n := len(body)
	for {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		out = append(out, b)
		if n == 0 {
			break
		}
	}
	return append(out, body...)
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// errMalformed is a packet from the hub that breaks MQTT 5's encoding.
var errMalformed = errors.New("malformed packet from the hub")

// ReadPacket reads one packet from r, refusing one longer than MaxPacket
// before reading its body, and a CONNACK of MQTT 3.1.1 (two bytes, no
// properties: ErrNotMQTT5). Of a CONNACK, PUBACK or DISCONNECT it decodes
// the reason code and the Reason String property; of others, the type.
func ReadPacket(r io.Reader) (Packet, error) {
	var one [1]byte
	if _, err := io.ReadFull(r, one[:]); err != nil {
		return Packet{}, err
	}
	p := Packet{Type: one[0] >> 4}
	n, mult := 0, 1
	for i := 0; ; i++ {
		if i == 4 {
			return Packet{}, fmt.Errorf("%w: remaining length longer than 4 bytes", errMalformed)
		}
		if _, err := io.ReadFull(r, one[:]); err != nil {
			return Packet{}, err
		}
		n += int(one[0]&0x7f) * mult
		mult *= 128
		if one[0]&0x80 == 0 {
			break
		}
	}
	if n > MaxPacket {
		return Packet{}, fmt.Errorf("packet of %d bytes from the hub: more than %d", n, MaxPacket)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return Packet{}, err
	}
	var props []byte
	switch p.Type {
	case typeConnack:
		if n == 2 {
			// MQTT 3.1.1's CONNACK has no properties: a 3.1.1 hub
			// refusing protocol level 5 (return code 0x01).
			return Packet{}, fmt.Errorf("%w: it answered as an MQTT 3.1.1 hub (CONNACK return code 0x%02x)", ErrNotMQTT5, body[1])
		}
		if n < 3 {
			return Packet{}, fmt.Errorf("%w: CONNACK of %d bytes", errMalformed, n)
		}
		p.Code, props = body[1], body[2:]
	case typePuback:
		if n < 2 {
			return Packet{}, fmt.Errorf("%w: PUBACK of %d bytes", errMalformed, n)
		}
		p.PacketID = binary.BigEndian.Uint16(body)
		if n > 2 {
			p.Code = body[2]
		}
		if n > 3 {
			props = body[3:]
		}
	case typeDisconnect:
		if n > 0 {
			p.Code = body[0]
		}
		if n > 1 {
			props = body[1:]
		}
	default:
		return p, nil
	}
	if props != nil {
		reason, err := reasonString(props)
		if err != nil {
			return Packet{}, err
		}
		p.Reason = reason
	}
	return p, nil
}

// reasonString walks a property list (its length, then the properties,
// section 2.2.2) and returns its Reason String (0x1F), if any.
func reasonString(b []byte) (string, error) {
	n, used, err := vbi(b)
	if err != nil {
		return "", err
	}
	b = b[used:]
	if n > len(b) {
		return "", fmt.Errorf("%w: properties of %d bytes in %d", errMalformed, n, len(b))
	}
	b = b[:n]
	reason := ""
	for len(b) > 0 {
		id := b[0]
		b = b[1:]
		var size int
		switch id {
		case 0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A: // byte
			size = 1
		case 0x13, 0x21, 0x22, 0x23: // two-byte integer
			size = 2
		case 0x02, 0x11, 0x18, 0x27: // four-byte integer
			size = 4
		case 0x0B: // variable byte integer
			_, used, err := vbi(b)
			if err != nil {
				return "", err
			}
			size = used
		case 0x03, 0x08, 0x09, 0x12, 0x15, 0x16, 0x1A, 0x1C, 0x1F: // string or binary
			if len(b) < 2 {
				return "", fmt.Errorf("%w: property 0x%02x cut", errMalformed, id)
			}
			size = 2 + int(binary.BigEndian.Uint16(b))
			if id == 0x1F && size <= len(b) {
				reason = string(b[2:size])
			}
		case 0x26: // string pair
			if len(b) < 2 {
				return "", fmt.Errorf("%w: property 0x26 cut", errMalformed)
			}
			k := 2 + int(binary.BigEndian.Uint16(b))
			if len(b) < k+2 {
				return "", fmt.Errorf("%w: property 0x26 cut", errMalformed)
			}
			size = k + 2 + int(binary.BigEndian.Uint16(b[k:]))
		default:
			return "", fmt.Errorf("%w: unknown property 0x%02x", errMalformed, id)
		}
		if size > len(b) {
			return "", fmt.Errorf("%w: property 0x%02x cut", errMalformed, id)
		}
		b = b[size:]
	}
	return reason, nil
}

// vbi decodes a variable byte integer: its value and its length.
func vbi(b []byte) (n, used int, err error) {
	mult := 1
	for i := 0; i < 4; i++ {
		if i >= len(b) {
			return 0, 0, fmt.Errorf("%w: variable byte integer cut", errMalformed)
		}
		n += int(b[i]&0x7f) * mult
		mult *= 128
		if b[i]&0x80 == 0 {
			return n, i + 1, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: variable byte integer longer than 4 bytes", errMalformed)
}
