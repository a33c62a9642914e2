// Package resp is the Redis client of the Redis store: the RESP2 protocol
// over TCP or TLS, a small pool of connections, commands sent one at a time
// or pipelined, scripts by SHA with their source as the fallback, and
// nothing else.
//
// # Why not a general client
//
// The store sends a dozen commands: PING, AUTH, SELECT, CONFIG GET, EVALSHA and
// EVAL, HMGET, GET, HGET, SMEMBERS, and DEL and SREM in a MULTI/EXEC block.
// github.com/redis/go-redis/v9, which served them before this package,
// brings cluster, sentinel, push notifications, hooks and some 400 commands.
// Every process of the binary maps its code whether it opens a Redis store
// or not (an agent on bbolt, the daemon, `openstarry version`): a linked
// package's initialisers and the code around them are paged in at every
// start. Measured with the standard build when this package replaced it:
// the binary 1.88 MB smaller (17.2 against 19.1 MB); an idle agent 14.2
// against 15.1 MiB VmRSS with the embedded broker and 13.4 against 14.1
// without (`go test -run '^$' -bench DaemonBoot ./cmd/openstarry/`); a
// Save's latency unchanged (storage/redis BenchmarkSave, 0.61 ms median
// either way).
//
// # Promises
//
// A command is never sent twice. A connection on which a command failed
// (it could not be written, its answer did not come in time, the context
// ended) is closed, and the caller learns that the outcome is unknown: the
// server may have run it.
//
// A reply is read within bounds: 512 MiB per bulk string (the server's own
// default proto-max-bulk-len), 1<<20 elements per array, 8 levels of
// nesting, 64 KiB per line. A reply outside them is a protocol error, and
// its connection is closed.
package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Reply is one RESP2 reply.
type Reply struct {
	// Type is the reply's first byte: '+' simple string, '-' error, ':'
	// integer, '$' bulk string, '*' array.
	Type  byte
	Str   []byte  // the text of '+', '-' and '$'
	Int   int64   // the value of ':'
	Array []Reply // the elements of '*'
	Null  bool    // "$-1" or "*-1": no value
}

// Error is an error reply of the server, without its '-': "ERR ...",
// "NOSCRIPT ...", or what a script returned with redis.error_reply.
type Error string

func (e Error) Error() string { return string(e) }

// ErrNil is returned for a null reply where a value was asked for: GET of
// a key that does not exist.
var ErrNil = errors.New("redis: nil")

// ErrProtocol is wrapped by the errors of a reply that is not RESP2 or is
// beyond the limits of the package documentation.
var ErrProtocol = errors.New("redis: protocol error")

// Err returns the server's error of an error reply, nil for the others.
func (r Reply) Err() error {
	if r.Type == '-' {
		return Error(r.Str)
	}
	return nil
}

// Bytes returns the value of a bulk or simple string; ErrNil for a null
// reply, the server's error for an error reply.
func (r Reply) Bytes() ([]byte, error) {
	switch {
	case r.Type == '-':
		return nil, r.Err()
	case r.Null:
		return nil, ErrNil
	case r.Type == '$' || r.Type == '+':
		return r.Str, nil
	}
	return nil, fmt.Errorf("%w: a string was expected, the reply is of type %q", ErrProtocol, r.Type)
}

// Strings returns the elements of an array of strings; a null element is
// "".
func (r Reply) Strings() ([]string, error) {
	if err := r.Err(); err != nil {
		return nil, err
	}
	if r.Type != '*' {
		return nil, fmt.Errorf("%w: an array was expected, the reply is of type %q", ErrProtocol, r.Type)
	}
	out := make([]string, len(r.Array))
	for i, e := range r.Array {
		if e.Null {
			continue
		}
		b, err := e.Bytes()
		if err != nil {
			return nil, err
		}
		out[i] = string(b)
	}
	return out, nil
}

const (
	maxBulk  = 512 << 20
	maxArray = 1 << 20
	maxDepth = 8
	maxLine  = 64 << 10
)

// readReply reads one reply.
func readReply(br *bufio.Reader) (Reply, error) {
	return readDepth(br, 0)
}

func readDepth(br *bufio.Reader, depth int) (Reply, error) {
	line, err := readLine(br)
	if err != nil {
		return Reply{}, err
	}
	if len(line) == 0 {
		return Reply{}, fmt.Errorf("%w: an empty line", ErrProtocol)
	}
	r := Reply{Type: line[0]}
	body := line[1:]
	switch r.Type {
	case '+', '-':
		r.Str = bytes.Clone(body)
		return r, nil
	case ':':
		r.Int, err = strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return Reply{}, fmt.Errorf("%w: integer %q", ErrProtocol, body)
		}
		return r, nil
	case '$':
		n, err := length(body, maxBulk)
		if err != nil {
			return Reply{}, err
		}
		if r.Null = n < 0; r.Null {
			return r, nil
		}
		var buf bytes.Buffer
		// Grown as the bytes come, not from the announced length: a
		// damaged length costs what the connection delivers, no more.
		buf.Grow(min(n+2, 64<<10))
		if _, err := io.CopyN(&buf, br, int64(n)+2); err != nil {
			return Reply{}, unexpected(err)
		}
		b := buf.Bytes()
		if b[n] != '\r' || b[n+1] != '\n' {
			return Reply{}, fmt.Errorf("%w: a bulk string of %d bytes does not end with CRLF", ErrProtocol, n)
		}
		r.Str = b[:n:n]
		return r, nil
	case '*':
		n, err := length(body, maxArray)
		if err != nil {
			return Reply{}, err
		}
		if r.Null = n < 0; r.Null {
			return r, nil
		}
		if depth+1 >= maxDepth {
			return Reply{}, fmt.Errorf("%w: arrays nested deeper than %d", ErrProtocol, maxDepth)
		}
		r.Array = make([]Reply, 0, min(n, 1024))
		for range n {
			e, err := readDepth(br, depth+1)
			if err != nil {
				return Reply{}, err
			}
			r.Array = append(r.Array, e)
		}
		return r, nil
	}
	return Reply{}, fmt.Errorf("%w: unknown reply type %q", ErrProtocol, r.Type)
}

// length reads the length of a bulk string or array: -1 for null, else
// 0..limit.
func length(b []byte, limit int) (int, error) {
	n, err := strconv.Atoi(string(b))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%w: length %q", ErrProtocol, b)
	case n == -1:
		return -1, nil
	case n < 0 || n > limit:
		return 0, fmt.Errorf("%w: length %d out of range 0..%d", ErrProtocol, n, limit)
	}
	return n, nil
}

// readLine reads one line and returns it without its CRLF. The slice is
// valid until the next read.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		// Longer than the buffer: gather it, up to maxLine.
		long := bytes.Clone(line)
		for errors.Is(err, bufio.ErrBufferFull) && len(long) <= maxLine {
			line, err = br.ReadSlice('\n')
			long = append(long, line...)
		}
		if len(long) > maxLine {
			return nil, fmt.Errorf("%w: a line longer than %d bytes", ErrProtocol, maxLine)
		}
		line = long
	}
	if err != nil {
		return nil, unexpected(err)
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: a line does not end with CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}

// unexpected turns the end of the stream within a reply into
// io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// appendCommand appends a command in RESP2: an array of bulk strings.
// Arguments are strings, byte slices, or integers.
func appendCommand(b []byte, args []any) ([]byte, error) {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		var s []byte
		switch v := a.(type) {
		case string:
			b = appendBulk(b, len(v))
			b = append(b, v...)
			b = append(b, '\r', '\n')
			continue
		case []byte:
			s = v
		case int:
			s = strconv.AppendInt(nil, int64(v), 10)
		case int64:
			s = strconv.AppendInt(nil, v, 10)
		case uint64:
			s = strconv.AppendUint(nil, v, 10)
		default:
			return nil, fmt.Errorf("redis: argument of type %T", a)
		}
		b = appendBulk(b, len(s))
		b = append(b, s...)
		b = append(b, '\r', '\n')
	}
	return b, nil
}

func appendBulk(b []byte, n int) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}
