package agent

import (
	"encoding/json"
	"unicode/utf8"
)

// scanTask is DecodeTask's fast path: one pass over a task in the form
// every client sends (one object of the task's fields, spelt as the
// documentation spells them, their string values without escapes), which
// checks what the slow path checks (valid JSON in valid UTF-8, nothing
// after the object, no field unknown or given twice, no key twice in one
// object of the input) and reads the fields as it goes. The slow path
// (encoding/json, then the duplicate-key scan, after a UTF-8 check) read
// the task three times and copied it once.
//
// ok is false for anything else, valid or not: the caller decodes it again
// the slow way, which says what is wrong in the words it always used. So
// the fast path never refuses a task; it only accepts, and only what the
// slow path accepts, as the same Task (FuzzScanTask compares them).
func scanTask(data []byte) (t Task, ok bool) {
	s := taskScanner{data: data}
	s.ws()
	if !s.byte('{') {
		return Task{}, false
	}
	var seen uint8 // a bit per field
	s.ws()
	if s.byte('}') {
		return t, s.end()
	}
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok {
			return Task{}, false
		}
		var bit uint8
		var str *string
		var raw *json.RawMessage
		switch string(key) {
		case "task_id":
			bit, str = 1, &t.TaskID
		case "type":
			bit, str = 2, &t.Type
		case "input":
			bit, raw = 4, &t.Input
		case "project_id":
			bit, str = 8, &t.ProjectID
		case "session_id":
			bit, str = 16, &t.SessionID
		case "deadline":
			bit, str = 32, &t.Deadline
		case "resume_context":
			bit, raw = 64, &t.ResumeContext
		default: // unknown, or a known one spelt otherwise: the slow path says which
			return Task{}, false
		}
		if seen&bit != 0 {
			return Task{}, false
		}
		seen |= bit
		s.ws()
		if !s.byte(':') {
			return Task{}, false
		}
		s.ws()
		if str != nil {
			v, ok := s.plainString()
			if !ok {
				return Task{}, false
			}
			*str = string(v)
		} else {
			start := s.i
			if !s.value(0) {
				return Task{}, false
			}
			// Three-index: the task's input is never appended to in place.
			*raw = json.RawMessage(data[start:s.i:s.i])
		}
		s.ws()
		if s.byte('}') {
			return t, s.end()
		}
		if !s.byte(',') {
			return Task{}, false
		}
	}
}

// taskScanner reads JSON for scanTask. Its methods report false for what
// the fast path leaves to the slow one.
type taskScanner struct {
	data []byte
	i    int
}

// maxScanDepth bounds the nesting scanTask follows (encoding/json's own
// limit is 10,000; deeper input is left to it).
const maxScanDepth = 1000

func (s *taskScanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c if it is next.
func (s *taskScanner) byte(c byte) bool {
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space follows.
func (s *taskScanner) end() bool {
	s.ws()
	return s.i == len(s.data)
}

// plainString reads a string without escapes and returns what is between
// its quotes, checked: valid UTF-8, no control character.
func (s *taskScanner) plainString() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return s.data[start : s.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.data[s.i:])
			if r == utf8.RuneError && n == 1 {
				return nil, false
			}
			s.i += n
		}
	}
	return nil, false
}

// str reads a string, escapes allowed (checked as JSON's grammar says).
func (s *taskScanner) str() bool {
	if !s.byte('"') {
		return false
	}
	for s.i < len(s.data) {
		c := s.data[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c == '\\':
			s.i++
			if s.i >= len(s.data) {
				return false
			}
			switch s.data[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				s.i++
				for range 4 {
					if s.i >= len(s.data) || !isHex(s.data[s.i]) {
						return false
					}
					s.i++
				}
			default:
				return false
			}
		case c < 0x20:
			return false
		case c < utf8.RuneSelf:
			s.i++
		default:
			r, n := utf8.DecodeRune(s.data[s.i:])
			if r == utf8.RuneError && n == 1 {
				return false
			}
			s.i += n
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// value reads one JSON value of the input, checking that no object in it
// has a key twice (compared exactly, as duplicateKey compares nested keys;
// an object whose keys have escapes is left to the slow path).
func (s *taskScanner) value(depth int) bool {
	if s.i >= len(s.data) || depth > maxScanDepth {
		return false
	}
	switch c := s.data[s.i]; {
	case c == '{':
		s.i++
		s.ws()
		if s.byte('}') {
			return true
		}
		var keys [][]byte
		var seen map[string]struct{}
		for {
			s.ws()
			k, ok := s.plainString()
			if !ok {
				return false
			}
			if seen != nil {
				if _, dup := seen[string(k)]; dup {
					return false
				}
				seen[string(k)] = struct{}{}
			} else {
				for _, o := range keys {
					if string(o) == string(k) {
						return false
					}
				}
				if keys = append(keys, k); len(keys) > 16 {
					seen = make(map[string]struct{}, 2*len(keys))
					for _, o := range keys {
						seen[string(o)] = struct{}{}
					}
				}
			}
			s.ws()
			if !s.byte(':') {
				return false
			}
			s.ws()
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.byte('}') {
				return true
			}
			if !s.byte(',') {
				return false
			}
		}
	case c == '[':
		s.i++
		s.ws()
		if s.byte(']') {
			return true
		}
		for {
			s.ws()
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.byte(']') {
				return true
			}
			if !s.byte(',') {
				return false
			}
		}
	case c == '"':
		return s.str()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	}
	return false
}

func (s *taskScanner) literal(w string) bool {
	if len(s.data)-s.i >= len(w) && string(s.data[s.i:s.i+len(w)]) == w {
		s.i += len(w)
		return true
	}
	return false
}

// number reads a number as JSON's grammar gives it:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *taskScanner) number() bool {
	s.byte('-')
	switch {
	case s.byte('0'):
	case s.i < len(s.data) && '1' <= s.data[s.i] && s.data[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.byte('.') && !s.digits() {
		return false
	}
	if s.byte('e') || s.byte('E') {
		if !s.byte('+') {
			s.byte('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits reads one or more digits.
func (s *taskScanner) digits() bool {
	start := s.i
	for s.i < len(s.data) && '0' <= s.data[s.i] && s.data[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}
