package resp

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func read(s string) (Reply, error) {
	return readReply(bufio.NewReaderSize(strings.NewReader(s), 16))
}

func TestReadReply(t *testing.T) {
	long := strings.Repeat("x", 100) // longer than the reader's 16-byte buffer
	for _, tc := range []struct {
		in   string
		want Reply
	}{
		{"+OK\r\n", Reply{Type: '+', Str: []byte("OK")}},
		{"-ERR wrong\r\n", Reply{Type: '-', Str: []byte("ERR wrong")}},
		{":-42\r\n", Reply{Type: ':', Int: -42}},
		{"$5\r\nhe\r\no\r\n", Reply{Type: '$', Str: []byte("he\r\no")}},
		{"$0\r\n\r\n", Reply{Type: '$', Str: []byte{}}},
		{"$-1\r\n", Reply{Type: '$', Null: true}},
		{"*-1\r\n", Reply{Type: '*', Null: true}},
		{"*0\r\n", Reply{Type: '*', Array: []Reply{}}},
		{"+" + long + "\r\n", Reply{Type: '+', Str: []byte(long)}},
		{"*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:7\r\n", Reply{Type: '*', Array: []Reply{
			{Type: '$', Str: []byte("a")}, {Type: '$', Null: true}, {Type: '*', Array: []Reply{{Type: ':', Int: 7}}}}}},
	} {
		got, err := read(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestReadReplyRefuses(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", io.ErrUnexpectedEOF},
		{"+OK", io.ErrUnexpectedEOF},
		{"$5\r\nabc", io.ErrUnexpectedEOF},
		{"*2\r\n:1\r\n", io.ErrUnexpectedEOF},
		{"+OK\n", ErrProtocol},
		{"\r\n", ErrProtocol},
		{"?x\r\n", ErrProtocol},
		{":12a\r\n", ErrProtocol},
		{"$3\r\nabcd\r\n", ErrProtocol},
		{"$-2\r\n", ErrProtocol},
		{"$" + strconv.Itoa(maxBulk+1) + "\r\n", ErrProtocol},
		{"*" + strconv.Itoa(maxArray+1) + "\r\n", ErrProtocol},
		{strings.Repeat("*1\r\n", maxDepth) + ":1\r\n", ErrProtocol},
		{"+" + strings.Repeat("x", maxLine+1) + "\r\n", ErrProtocol},
	} {
		name := tc.in
		if len(name) > 40 {
			name = name[:40] + "..."
		}
		if _, err := read(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("%q: %v; want %v", name, err, tc.want)
		}
	}
	// The deepest nesting allowed reads.
	if _, err := read(strings.Repeat("*1\r\n", maxDepth-1) + ":1\r\n"); err != nil {
		t.Errorf("%d levels: %v", maxDepth-1, err)
	}
}

func TestReplyAccessors(t *testing.T) {
	if _, err := (Reply{Type: '$', Null: true}).Bytes(); !errors.Is(err, ErrNil) {
		t.Errorf("null bulk: %v", err)
	}
	var e Error
	if _, err := (Reply{Type: '-', Str: []byte("WRONGTYPE x")}).Bytes(); !errors.As(err, &e) || e != "WRONGTYPE x" {
		t.Errorf("error reply: %v", err)
	}
	if _, err := (Reply{Type: ':', Int: 1}).Bytes(); !errors.Is(err, ErrProtocol) {
		t.Errorf("integer as bytes: %v", err)
	}
	got, err := Reply{Type: '*', Array: []Reply{{Type: '$', Str: []byte("a")}, {Type: '$', Null: true}}}.Strings()
	if err != nil || !reflect.DeepEqual(got, []string{"a", ""}) {
		t.Errorf("strings: %q, %v", got, err)
	}
	if _, err := (Reply{Type: '*', Array: []Reply{{Type: ':', Int: 1}}}).Strings(); !errors.Is(err, ErrProtocol) {
		t.Errorf("array of integers as strings: %v", err)
	}
}

func TestAppendCommand(t *testing.T) {
	b, err := appendCommand(nil, []any{"SET", []byte("k\r\n"), 7, int64(-8), uint64(9)})
	want := "*5\r\n$3\r\nSET\r\n$3\r\nk\r\n\r\n$1\r\n7\r\n$2\r\n-8\r\n$1\r\n9\r\n"
	if err != nil || string(b) != want {
		t.Fatalf("%q, %v; want %q", b, err, want)
	}
	if _, err := appendCommand(nil, []any{"GET", 1.5}); err == nil {
		t.Fatal("a float argument was encoded")
	}
}

// encode writes a reply back in RESP2, for the fuzz target's round trip.
func encode(b []byte, r Reply) []byte {
	b = append(b, r.Type)
	switch {
	case r.Null:
		return append(b, "-1\r\n"...)
	case r.Type == ':':
		b = strconv.AppendInt(b, r.Int, 10)
	case r.Type == '$':
		b = strconv.AppendInt(b, int64(len(r.Str)), 10)
		b = append(b, '\r', '\n')
		b = append(b, r.Str...)
	case r.Type == '*':
		b = strconv.AppendInt(b, int64(len(r.Array)), 10)
		b = append(b, '\r', '\n')
		for _, e := range r.Array {
			b = encode(b, e)
		}
		return b
	default:
		b = append(b, r.Str...)
	}
	return append(b, '\r', '\n')
}

// FuzzReadReply: whatever the bytes, readReply returns a reply or an
// error without panicking, and a reply it returns reads back the same
// after encoding.
func FuzzReadReply(f *testing.F) {
	for _, s := range []string{"+OK\r\n", "-ERR x\r\n", ":1\r\n", "$3\r\nabc\r\n", "$-1\r\n", "*2\r\n$1\r\na\r\n*-1\r\n",
		"*1\r\n*1\r\n*1\r\n:0\r\n", "$99999999999\r\n", "*3\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r, err := readReply(bufio.NewReaderSize(bytes.NewReader(in), 16))
		if err != nil {
			return
		}
		out := encode(nil, r)
		again, err := readReply(bufio.NewReader(bytes.NewReader(out)))
		if err != nil || !reflect.DeepEqual(normal(again), normal(r)) {
			t.Fatalf("%q read as %+v, encoded %q, read back %+v, %v", in, r, out, again, err)
		}
	})
}

// normal makes empty and nil slices equal for the round trip's comparison.
func normal(r Reply) Reply {
	if len(r.Str) == 0 {
		r.Str = nil
	}
	if len(r.Array) == 0 {
		r.Array = nil
	}
	for i := range r.Array {
		r.Array[i] = normal(r.Array[i])
	}
	return r
}
