package agent

import (
	"encoding/json"
	"slices"
	"strconv"
)

// The encoders of this file write what json.Marshal writes for a Result, an
// Event and a TaskState, byte for byte, without its reflection and without
// its second pass over a json.RawMessage (which it scans to check and to
// compact it): every task's result is encoded for the outbox, for the task
// index and for its MQTT message, and every queued task for the queue. A
// field they cannot write as json.Marshal would by the fast path (a string
// with a byte that needs escaping, a raw value that is not already compact
// or holds a character json.Marshal escapes) is encoded by json.Marshal;
// a raw value that is not valid JSON makes the whole value go through
// json.Marshal, so its error is json.Marshal's too. FuzzAppendJSON holds
// them to that.

// AppendJSON appends json.Marshal(r) to dst.
func (r *Result) AppendJSON(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = slices.Grow(dst, 128+len(r.TaskID)+len(r.AgentID)+len(r.Status)+len(r.Output)+len(r.Error)+len(r.Source))
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, r.Seq, 10)
	dst = append(dst, `,"task_id":`...)
	dst = appendString(dst, r.TaskID)
	dst = append(dst, `,"agent_id":`...)
	dst = appendString(dst, r.AgentID)
	dst = append(dst, `,"status":`...)
	dst = appendString(dst, r.Status)
	if len(r.Output) > 0 {
		dst = append(dst, `,"output":`...)
		var ok bool
		if dst, ok = appendRaw(dst, r.Output); !ok {
			return marshalInto(dst[:start], r)
		}
	}
	if r.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = appendString(dst, r.Error)
	}
	dst = append(dst, `,"tick_index":`...)
	dst = strconv.AppendUint(dst, r.TickIndex, 10)
	if r.Source != "" {
		dst = append(dst, `,"source":`...)
		dst = appendString(dst, r.Source)
	}
	if r.FinishedAt != 0 {
		dst = append(dst, `,"finished_at":`...)
		dst = strconv.AppendInt(dst, r.FinishedAt, 10)
	}
	return append(dst, '}'), nil
}

// AppendJSON appends json.Marshal(e) to dst.
func (e *Event) AppendJSON(dst []byte) ([]byte, error) {
	start := len(dst)
	dst = slices.Grow(dst, 80+len(e.Source)+len(e.Type)+len(e.Payload)+len(e.ID))
	dst = append(dst, `{"source":`...)
	dst = appendString(dst, e.Source)
	dst = append(dst, `,"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"payload":`...)
	if e.Payload == nil {
		dst = append(dst, "null"...)
	} else {
		var ok bool
		if dst, ok = appendRaw(dst, e.Payload); !ok {
			return marshalInto(dst[:start], e)
		}
	}
	if e.ID != "" {
		dst = append(dst, `,"id":`...)
		dst = appendString(dst, e.ID)
	}
	if e.ReceivedAt != 0 {
		dst = append(dst, `,"received_at":`...)
		dst = strconv.AppendInt(dst, e.ReceivedAt, 10)
	}
	return append(dst, '}'), nil
}

// AppendJSON appends json.Marshal(s) to dst.
func (s *TaskState) AppendJSON(dst []byte) ([]byte, error) {
	start := len(dst)
	if s.Current != nil {
		return marshalInto(dst, s)
	}
	dst = slices.Grow(dst, 80+len(s.TaskID)+len(s.AgentID)+len(s.Status)+len(s.Output)+len(s.Error))
	dst = append(dst, `{"task_id":`...)
	dst = appendString(dst, s.TaskID)
	dst = append(dst, `,"agent_id":`...)
	dst = appendString(dst, s.AgentID)
	dst = append(dst, `,"status":`...)
	dst = appendString(dst, s.Status)
	if len(s.Output) > 0 {
		dst = append(dst, `,"output":`...)
		var ok bool
		if dst, ok = appendRaw(dst, s.Output); !ok {
			return marshalInto(dst[:start], s)
		}
	}
	if s.Error != "" {
		dst = append(dst, `,"error":`...)
		dst = appendString(dst, s.Error)
	}
	if s.TickIndex != 0 {
		dst = append(dst, `,"tick_index":`...)
		dst = strconv.AppendUint(dst, s.TickIndex, 10)
	}
	return append(dst, '}'), nil
}

// marshalInto appends json.Marshal(v) to dst, or returns its error.
func marshalInto(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}

// safeASCII[c] is true for the bytes json.Marshal writes as they are
// inside a string: printable ASCII but for '"', '\\' and, as it escapes
// them for HTML, '<', '>' and '&'.
var safeASCII = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
	}
	return t
}()

// appendString appends s as json.Marshal writes a string.
func appendString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !safeASCII[s[i]] {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// appendRaw appends raw as it is when json.Marshal would write it so (it
// is valid JSON, compact, and holds no '<', '>', '&' or U+2028/U+2029,
// which json.Marshal escapes), else the value json.Marshal writes for it.
// It reports false, and appends nothing, when raw is not valid JSON.
func appendRaw(dst []byte, raw json.RawMessage) ([]byte, bool) {
	if n, ok := scanCompact(raw, 0, 0); ok && n == len(raw) {
		return append(dst, raw...), true
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return dst, false
	}
	return append(dst, b...), true
}

// maxCompactDepth bounds scanCompact's recursion; deeper values take
// json.Marshal's path.
const maxCompactDepth = 64

// scanCompact returns the end of the JSON value at p[i:] when it is valid,
// has no whitespace outside its strings, and holds no byte json.Marshal
// would change in a json.RawMessage ('<', '>', '&', and the first byte of
// U+2028 and U+2029, 0xE2, which is also that of other characters: those
// take the slow path too). ok is false otherwise, and the caller goes the
// slow way; so scanCompact may refuse what is valid, never accept what is
// not.
func scanCompact(p []byte, i, depth int) (end int, ok bool) {
	if i >= len(p) || depth > maxCompactDepth {
		return i, false
	}
	switch c := p[i]; c {
	case '"':
		return scanString(p, i)
	case '{':
		i++
		if i < len(p) && p[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(p) || p[i] != '"' {
				return i, false
			}
			if i, ok = scanString(p, i); !ok || i >= len(p) || p[i] != ':' {
				return i, false
			}
			if i, ok = scanCompact(p, i+1, depth+1); !ok || i >= len(p) {
				return i, false
			}
			switch p[i] {
			case ',':
				i++
			case '}':
				return i + 1, true
			default:
				return i, false
			}
		}
	case '[':
		i++
		if i < len(p) && p[i] == ']' {
			return i + 1, true
		}
		for {
			if i, ok = scanCompact(p, i, depth+1); !ok || i >= len(p) {
				return i, false
			}
			switch p[i] {
			case ',':
				i++
			case ']':
				return i + 1, true
			default:
				return i, false
			}
		}
	case 't':
		return scanLiteral(p, i, "true")
	case 'f':
		return scanLiteral(p, i, "false")
	case 'n':
		return scanLiteral(p, i, "null")
	default:
		return scanNumber(p, i)
	}
}

func scanLiteral(p []byte, i int, lit string) (int, bool) {
	if len(p)-i < len(lit) || string(p[i:i+len(lit)]) != lit {
		return i, false
	}
	return i + len(lit), true
}

// plainInString[c] is true for the bytes scanString passes over without a
// second look: all but '"', '\\', the control characters, '<', '>', '&' and
// 0xE2.
var plainInString = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' && c != 0xe2
	}
	return t
}()

// scanString returns the end of the string at p[i] (a '"').
func scanString(p []byte, i int) (int, bool) {
	for i++; i < len(p); i++ {
		for i < len(p) && plainInString[p[i]] {
			i++
		}
		if i >= len(p) {
			break
		}
		c := p[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			i++
			if i >= len(p) {
				return i, false
			}
			switch p[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(p)-i < 5 || !isHex(p[i+1]) || !isHex(p[i+2]) || !isHex(p[i+3]) || !isHex(p[i+4]) {
					return i, false
				}
				i += 4
			default:
				return i, false
			}
		case c < 0x20, c == '<', c == '>', c == '&', c == 0xe2:
			return i, false
		}
	}
	return i, false
}

// scanNumber returns the end of the number at p[i:].
func scanNumber(p []byte, i int) (int, bool) {
	if i < len(p) && p[i] == '-' {
		i++
	}
	switch {
	case i < len(p) && p[i] == '0':
		i++
	case i < len(p) && '1' <= p[i] && p[i] <= '9':
		for i++; i < len(p) && '0' <= p[i] && p[i] <= '9'; i++ {
		}
	default:
		return i, false
	}
	if i < len(p) && p[i] == '.' {
		i++
		if i >= len(p) || p[i] < '0' || p[i] > '9' {
			return i, false
		}
		for ; i < len(p) && '0' <= p[i] && p[i] <= '9'; i++ {
		}
	}
	if i < len(p) && (p[i] == 'e' || p[i] == 'E') {
		i++
		if i < len(p) && (p[i] == '+' || p[i] == '-') {
			i++
		}
		if i >= len(p) || p[i] < '0' || p[i] > '9' {
			return i, false
		}
		for ; i < len(p) && '0' <= p[i] && p[i] <= '9'; i++ {
		}
	}
	return i, true
}
