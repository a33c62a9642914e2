// Package jsonerr owns how a refused JSON document is explained: in the
// words of the API that read it, never in Go's. encoding/json's errors name
// Go types and fields ("cannot unmarshal array into Go value of type
// agent.Task", "json: unknown field"), which mean nothing to someone writing
// a task or a request; Describe says what was expected instead ("task must
// be a JSON object, not an array").
package jsonerr

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
)

// unknownPrefix starts the error encoding/json returns for a field that
// DisallowUnknownFields refuses (it has no type of its own).
const unknownPrefix = "json: unknown field "

// Unknown reports the field named in an unknown-field error of
// encoding/json (with DisallowUnknownFields), unquoted.
func Unknown(err error) (string, bool) {
	if err == nil {
		return "", false
	}
	s := err.Error()
	i := strings.Index(s, unknownPrefix)
	if i < 0 {
		return "", false
	}
	q := s[i+len(unknownPrefix):]
	var name string
	if _, err := fmt.Sscanf(q, "%q", &name); err != nil {
		return strings.Trim(q, `"`), true
	}
	return name, true
}

// Describe explains err, an error of encoding/json decoding the document
// called what ("task", "body"), in one line that names no Go type:
//
//	task must be a JSON object, not an array
//	task: task_id must be a string, not a number
//	task has an unknown field "inptu"
//	task is not valid JSON: invalid character 'x' looking for beginning of value
func Describe(what string, err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		want := expected(te.Type)
		if te.Field == "" {
			return fmt.Sprintf("%s must be %s, not %s", what, want, article(te.Value))
		}
		return fmt.Sprintf("%s: %s must be %s, not %s", what, te.Field, want, article(te.Value))
	case errors.As(err, &se):
		return fmt.Sprintf("%s is not valid JSON: %s (at byte %d)", what, se.Error(), se.Offset)
	case errors.Is(err, io.EOF):
		return what + " is empty: want a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return what + " is not valid JSON: it ends early"
	}
	if name, ok := Unknown(err); ok {
		return fmt.Sprintf("%s has an unknown field %q", what, name)
	}
	return what + " is not valid JSON: " + strings.TrimPrefix(err.Error(), "json: ")
}

// expected names what a Go type accepts, as JSON.
func expected(t reflect.Type) string {
	if t == nil {
		return "a JSON value"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer of 0 or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	}
	return "another JSON value"
}

// article puts "a" or "an" before what encoding/json says it found: "array",
// "number", "number -1", "string", "bool", "object".
func article(v string) string {
	switch {
	case v == "":
		return "that value"
	case v == "bool":
		return "true or false"
	case strings.HasPrefix(v, "number "):
		return "the number " + strings.TrimPrefix(v, "number ")
	case strings.ContainsAny(v[:1], "aeiou"):
		return "an " + v
	}
	return "a " + v
}
