package mcp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeMessages: any line from a server decodes to JSON-RPC 2.0
// messages or to an error, without a panic, and every message decoded has
// a method or an id.
func FuzzDecodeMessages(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25"}}`,
		`{"jsonrpc":"2.0","id":"x","method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}`,
		`[{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"no"}},{"jsonrpc":"2.0","method":"m"}]`,
		`{"jsonrpc":"1.0","id":1}`, `[]`, `[1]`, `{}`, `null`, ``, `{"jsonrpc":"2.0"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msgs, err := decodeMessages(data)
		if err != nil {
			return
		}
		for _, m := range msgs {
			if m.JSONRPC != "2.0" || (m.Method == "" && len(m.ID) == 0) {
				t.Fatalf("decoded a message that is not one: %+v", m)
			}
		}
	})
}

// FuzzReadEvents: any event stream hands out the data of its events, each
// within maxMessage, and ends with nil or an error, never a panic. A
// stream written as the SDK writes events hands back exactly their data.
func FuzzReadEvents(f *testing.F) {
	for _, s := range []string{
		"event: message\ndata: {\"a\":1}\n\n",
		"data: one\ndata: two\n\n: comment\nid: 7\nretry: 10\n\ndata:x",
		"\n\n\ndata\n\n", "data: \r\n\r\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := readEvents(strings.NewReader(s), func(data []byte) (bool, error) {
			if len(data) == 0 || len(data) > maxMessage {
				t.Fatalf("event of %d bytes", len(data))
			}
			return false, nil
		})
		_ = err // a line over the scanner's bound is an error, not a panic
		// Round trip: s as the data of one event.
		if strings.ContainsAny(s, "\r\n") || s == "" {
			return
		}
		var got []string
		stream := "event: message\nid: 1\ndata: " + s + "\n\n"
		if err := readEvents(strings.NewReader(stream), func(data []byte) (bool, error) {
			got = append(got, string(data))
			return false, nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != s { // only the one space after "data:" is dropped
			t.Fatalf("events %q, want [%q]", got, s)
		}
	})
}

// TestReadEventsStops: the reader stops at the event that answers, even if
// the server keeps the stream open; an error from the handler ends it.
func TestReadEventsStops(t *testing.T) {
	stream := "data: a\n\ndata: b\n\ndata: c\n\n"
	var got []string
	err := readEvents(strings.NewReader(stream), func(data []byte) (bool, error) {
		got = append(got, string(data))
		return string(data) == "b", nil
	})
	if err != nil || strings.Join(got, ",") != "a,b" {
		t.Fatalf("got %v, %v", got, err)
	}
	boom := errors.New("boom")
	if err := readEvents(strings.NewReader(stream), func([]byte) (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	big := "data: " + strings.Repeat("x", maxMessage/2) + "\ndata: " + strings.Repeat("y", maxMessage/2) + "\n\n"
	if err := readEvents(strings.NewReader(big), func([]byte) (bool, error) { return false, nil }); err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("an event over maxMessage: %v", err)
	}
}

// TestDeliver: a response reaches its caller once; a ping from the server
// is answered with an empty result, any other request with method not
// found; a response to an id never given is dropped.
func TestDeliver(t *testing.T) {
	var sent [][]byte
	s := newSession()
	s.conn = connFunc(func(data []byte) { sent = append(sent, data) })
	ch := make(chan *message, 1)
	s.pending[7] = ch
	s.deliver(message{JSONRPC: "2.0", ID: json.RawMessage(`7`), Result: json.RawMessage(`{"ok":true}`)})
	if m := <-ch; string(m.Result) != `{"ok":true}` {
		t.Fatalf("result = %s", m.Result)
	}
	s.deliver(message{JSONRPC: "2.0", ID: json.RawMessage(`7`), Result: json.RawMessage(`{}`)}) // twice: dropped
	s.deliver(message{JSONRPC: "2.0", ID: json.RawMessage(`"abc"`), Result: json.RawMessage(`{}`)})
	s.deliver(message{JSONRPC: "2.0", ID: json.RawMessage(`"p1"`), Method: "ping"})
	s.deliver(message{JSONRPC: "2.0", ID: json.RawMessage(`9`), Method: "sampling/createMessage"})
	s.deliver(message{JSONRPC: "2.0", Method: "notifications/progress"})
	want := []string{
		`{"jsonrpc":"2.0","id":"p1","result":{}}`,
		`{"jsonrpc":"2.0","id":9,"error":{"code":-32601,"message":"method not found: sampling/createMessage"}}`,
	}
	if len(sent) != len(want) {
		t.Fatalf("sent %q", sent)
	}
	for i := range want {
		if !bytes.Equal(sent[i], []byte(want[i])) {
			t.Errorf("sent[%d] = %s, want %s", i, sent[i], want[i])
		}
	}
	if len(ch) != 0 {
		t.Fatal("a second response reached the caller")
	}
}

// connFunc is a conn that hands what is sent to a function.
type connFunc func([]byte)

func (f connFunc) send(_ context.Context, data []byte, _ int64) error { f(data); return nil }
func (connFunc) close() error                                         { return nil }
