package agent

import (
	"encoding/json"
	"strings"
)

// duplicateKey returns the first key that appears twice in one object of
// the JSON document data, which must be valid JSON. The task's own fields
// (the top-level object) are compared as encoding/json matches them,
// ignoring case, so {"task_id":"a","TASK_ID":"b"} is a duplicate too;
// nested objects compare keys exactly. Keys are compared unescaped.
func duplicateKey(data []byte) (string, bool) {
	s := scanner{data: data}
	s.ws()
	return s.value(0)
}

type scanner struct {
	data []byte
	i    int
}

func (s *scanner) ws() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value skips one value at s.i, reporting a duplicate key inside it.
func (s *scanner) value(depth int) (string, bool) {
	if s.i >= len(s.data) {
		return "", false
	}
	switch s.data[s.i] {
	case '{':
		return s.object(depth)
	case '[':
		s.i++
		for {
			s.ws()
			if s.i >= len(s.data) || s.data[s.i] == ']' {
				s.i++
				return "", false
			}
			if k, dup := s.value(depth + 1); dup {
				return k, true
			}
			s.ws()
			if s.i < len(s.data) && s.data[s.i] == ',' {
				s.i++
			}
		}
	case '"':
		s.str()
	default: // number, true, false, null
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return "", false
			}
			s.i++
		}
	}
	return "", false
}

// str skips a string at s.i and returns its raw bytes, quotes included.
func (s *scanner) str() []byte {
	start := s.i
	s.i++
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case '\\':
			s.i += 2
			continue
		case '"':
			s.i++
			return s.data[start:s.i]
		}
		s.i++
	}
	return s.data[start:]
}

func (s *scanner) object(depth int) (string, bool) {
	s.i++ // {
	var seen map[string]struct{}
	for {
		s.ws()
		if s.i >= len(s.data) || s.data[s.i] == '}' {
			s.i++
			return "", false
		}
		raw := s.str()
		key := string(raw[1 : len(raw)-1])
		if strings.IndexByte(key, '\\') >= 0 {
			_ = json.Unmarshal(raw, &key)
		}
		cmp := key
		if depth == 0 {
			cmp = strings.ToLower(key)
		}
		if seen == nil {
			seen = map[string]struct{}{}
		}
		if _, dup := seen[cmp]; dup {
			return key, true
		}
		seen[cmp] = struct{}{}
		s.ws()
		s.i++ // :
		s.ws()
		if k, dup := s.value(depth + 1); dup {
			return k, true
		}
		s.ws()
		if s.i < len(s.data) && s.data[s.i] == ',' {
			s.i++
		}
	}
}
