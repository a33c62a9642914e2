// Package jsonclip cuts a JSON document down to a size in bytes so that
// what is left is still valid JSON: it shortens long arrays and long
// strings everywhere in the document, evenly, rather than cutting the text
// (which leaves broken JSON that a model then reads). Session continuity
// uses it for the resume context a task carries and a model is shown.
package jsonclip

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Marker is the key added to an object document that was cut.
const Marker = "truncated"

// limits are the caps tried in turn, each smaller than the last: the most
// elements an array keeps and the most bytes a string keeps.
var limits = []struct{ arr, str int }{
	{64, 2048}, {32, 1024}, {16, 512}, {8, 256}, {4, 128}, {2, 64}, {1, 32}, {0, 16}, {0, 0},
}

// Clip returns data compacted when it fits in max bytes; otherwise the
// largest of its cuts that fits, an object cut getting "truncated": true;
// at worst {"truncated":true} (for an object) or null. The result is always
// valid JSON; cut reports whether anything was left out. Data that is not
// JSON comes back as a JSON string of it, cut the same way.
func Clip(data []byte, max int) (out []byte, cut bool) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		v = string(data)
	}
	if b, err := marshal(v); err == nil && len(b) <= max {
		return b, false
	}
	_, isObj := v.(map[string]any)
	for _, l := range limits {
		w := shrink(v, l.arr, l.str)
		if m, ok := w.(map[string]any); ok {
			m[Marker] = true
		}
		if b, err := marshal(w); err == nil && len(b) <= max {
			return b, true
		}
	}
	if isObj && max >= len(`{"truncated":true}`) {
		return []byte(`{"truncated":true}`), true
	}
	return []byte("null"), true
}

func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// shrink returns a copy of v with arrays cut to arr elements and strings
// to str bytes (on a rune boundary, then "…").
func shrink(v any, arr, str int) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = shrink(e, arr, str)
		}
		return out
	case []any:
		n := min(len(x), arr)
		out := make([]any, n)
		for i := range n {
			out[i] = shrink(x[i], arr, str)
		}
		return out
	case string:
		if len(x) <= str {
			return x
		}
		cut := str
		for cut > 0 && !utf8.RuneStart(x[cut]) {
			cut--
		}
		return x[:cut] + "…"
	}
	return v
}
