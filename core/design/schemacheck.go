// Template schema checking, without a JSON Schema library.
//
// This file owns the check of a template against template.schema.json. It
// interprets the few JSON Schema (draft 2020-12) keywords that schema uses,
// and no others: type, properties, required, additionalProperties, $ref to
// "#/$defs/NAME", $defs, pattern, minLength, maxLength, minimum, maximum,
// enum, const, if/then/else, items, minItems, maxItems and uniqueItems, plus
// the annotations $schema, $id, title and description. Loading the schema
// fails on any other keyword, so a keyword added to template.schema.json can
// never be silently ignored: either it is implemented here or the build's
// tests fail (TestSchemaCompiles).
//
// A general JSON Schema library is not linked into the binary because it
// compiles its meta-schemas when the program starts: well over a megabyte of
// allocations kept alive, and milliseconds of start-up, in every process of
// the binary, the daemon and each agent process alike, to check one small
// schema. Templates are rarely checked; start-up and resident memory are paid
// all the time. The tests still run a full implementation on the same schema
// and require both to agree (schemacheck_test.go).
//
// Errors are the same ValidationError values the rest of the package
// reports: one per broken rule, at the JSON pointer of the offending member
// (a missing or unknown field at its own path), with the keyword as the rule.

package design

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// draft2020 is the only $schema the checker accepts.
const draft2020 = "https://json-schema.org/draft/2020-12/schema"

// schemaNode is one loaded (sub)schema. It is immutable once loaded.
type schemaNode struct {
	loc    string // where it is in the schema document, as "#/properties/brain"
	always *bool  // the boolean schemas true and false

	types    []string // in the order typeNames gives; nil accepts any type
	hasConst bool
	constVal any
	hasEnum  bool
	enum     []any
	refName  string
	ref      *schemaNode

	properties map[string]*schemaNode
	required   []string
	additional *schemaNode // nil: any other member is allowed

	pattern              *regexp.Regexp
	minLength, maxLength int // -1 when absent

	minimum, maximum *big.Rat

	items              *schemaNode
	minItems, maxItems int // -1 when absent
	uniqueItems        bool

	ifS, thenS, elseS *schemaNode
}

// typeNames are the JSON Schema type names, in the order type errors list
// them.
var typeNames = []string{"null", "boolean", "number", "integer", "string", "array", "object"}

// loadSchema reads a JSON Schema that uses only the supported keywords. Every
// pattern is compiled and every $ref resolved here, once.
func loadSchema(data []byte) (*schemaNode, error) {
	doc, err := parseJSON(data)
	if err != nil {
		return nil, fmt.Errorf("design: parse template.schema.json: %w", err)
	}
	l := &schemaLoader{defs: map[string]*schemaNode{}}
	root, err := l.node(doc, "#", true)
	if err != nil {
		return nil, fmt.Errorf("design: template.schema.json: %w", err)
	}
	for _, n := range l.all {
		if n.refName == "" {
			continue
		}
		target, ok := l.defs[n.refName]
		if !ok {
			return nil, fmt.Errorf("design: template.schema.json: %s: $ref %q: no such definition in $defs", n.loc, "#/$defs/"+n.refName)
		}
		n.ref = target
	}
	if err := checkRefCycles(l.all); err != nil {
		return nil, fmt.Errorf("design: template.schema.json: %w", err)
	}
	return root, nil
}

type schemaLoader struct {
	defs map[string]*schemaNode
	all  []*schemaNode
}

func (l *schemaLoader) node(v any, loc string, root bool) (*schemaNode, error) {
	n := &schemaNode{loc: loc, minLength: -1, maxLength: -1, minItems: -1, maxItems: -1}
	l.all = append(l.all, n)
	switch v := v.(type) {
	case bool:
		n.always = &v
		return n, nil
	case map[string]any:
		if root {
			if s, ok := v["$schema"].(string); !ok || s != draft2020 {
				return nil, fmt.Errorf("%s: $schema must be %q", loc, draft2020)
			}
		}
		// Sorted, so that a schema with several faults always reports the
		// same one.
		for _, kw := range slices.Sorted(maps.Keys(v)) {
			if err := l.keyword(n, kw, v[kw], root); err != nil {
				return nil, fmt.Errorf("%s: %w", loc, err)
			}
		}
		if (n.thenS != nil || n.elseS != nil) && n.ifS == nil {
			return nil, fmt.Errorf("%s: then or else without if", loc)
		}
		return n, nil
	default:
		return nil, fmt.Errorf("%s: a schema must be an object or a boolean, not %s", loc, jsonTypeName(v))
	}
}

// keyword loads one keyword of n. Its error names the keyword; node adds
// where it is.
func (l *schemaLoader) keyword(n *schemaNode, kw string, v any, root bool) error {
	at := n.loc + "/" + escapePointer(kw)
	var err error
	switch kw {
	case "$schema", "$id":
		if !root {
			return fmt.Errorf("%s is only supported at the root of the schema", kw)
		}
		err = wantString(kw, v)
	case "title", "description":
		err = wantString(kw, v)
	case "$defs":
		if !root {
			return fmt.Errorf("$defs is only supported at the root of the schema")
		}
		l.defs, err = l.nodes(kw, v, at)
	case "type":
		n.types, err = loadTypes(v)
	case "properties":
		n.properties, err = l.nodes(kw, v, at)
	case "required":
		n.required, err = loadRequired(v)
	case "additionalProperties":
		n.additional, err = l.node(v, at, false)
	case "$ref":
		n.refName, err = loadRef(v)
	case "pattern":
		var s string
		if s, err = wantStringValue(kw, v); err != nil {
			return err
		}
		if n.pattern, err = regexp.Compile(s); err != nil {
			return fmt.Errorf("pattern %q: %w", s, err)
		}
	case "minLength":
		n.minLength, err = loadCount(kw, v)
	case "maxLength":
		n.maxLength, err = loadCount(kw, v)
	case "minItems":
		n.minItems, err = loadCount(kw, v)
	case "maxItems":
		n.maxItems, err = loadCount(kw, v)
	case "minimum":
		n.minimum, err = loadBound(kw, v)
	case "maximum":
		n.maximum, err = loadBound(kw, v)
	case "enum":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("enum must be an array, not %s", jsonTypeName(v))
		}
		n.hasEnum, n.enum = true, arr
	case "const":
		n.hasConst, n.constVal = true, v
	case "if":
		n.ifS, err = l.node(v, at, false)
	case "then":
		n.thenS, err = l.node(v, at, false)
	case "else":
		n.elseS, err = l.node(v, at, false)
	case "items":
		if _, ok := v.([]any); ok {
			return fmt.Errorf("items must be a schema (an array of schemas is prefixItems in draft 2020-12, which is not supported)")
		}
		n.items, err = l.node(v, at, false)
	case "uniqueItems":
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("uniqueItems must be a boolean, not %s", jsonTypeName(v))
		}
		n.uniqueItems = b
	default:
		return fmt.Errorf("keyword %q is not supported: core/design/schemacheck.go implements only the keywords template.schema.json uses; implement it there (and test it against the library) before using it", kw)
	}
	return err
}

// nodes loads the object v of keyword kw (properties, $defs), found at
// at: a schema per member, in the order of their names.
func (l *schemaLoader) nodes(kw string, v any, at string) (map[string]*schemaNode, error) {
	obj, err := wantObject(kw, v)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*schemaNode, len(obj))
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		if out[name], err = l.node(obj[name], at+"/"+escapePointer(name), false); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func wantString(kw string, v any) error {
	_, err := wantStringValue(kw, v)
	return err
}

func wantStringValue(kw string, v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s must be a string, not %s", kw, jsonTypeName(v))
	}
	return s, nil
}

func wantObject(kw string, v any) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s must be an object, not %s", kw, jsonTypeName(v))
	}
	return m, nil
}

func loadTypes(v any) ([]string, error) {
	var names []any
	switch v := v.(type) {
	case string:
		names = []any{v}
	case []any:
		if len(v) == 0 {
			return nil, fmt.Errorf("type must not be an empty array")
		}
		names = v
	default:
		return nil, fmt.Errorf("type must be a string or an array of strings, not %s", jsonTypeName(v))
	}
	seen := map[string]bool{}
	for _, x := range names {
		s, ok := x.(string)
		if !ok || !slices.Contains(typeNames, s) {
			return nil, fmt.Errorf("type %v is not one of %s", display(x), strings.Join(typeNames, ", "))
		}
		if seen[s] {
			return nil, fmt.Errorf("type %q listed twice", s)
		}
		seen[s] = true
	}
	var types []string
	for _, t := range typeNames {
		if seen[t] {
			types = append(types, t)
		}
	}
	return types, nil
}

func loadRequired(v any) ([]string, error) {
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("required must be an array of strings, not %s", jsonTypeName(v))
	}
	out := make([]string, 0, len(arr))
	for _, x := range arr {
		s, ok := x.(string)
		if !ok {
			return nil, fmt.Errorf("required must be an array of strings, holds %s", jsonTypeName(x))
		}
		if slices.Contains(out, s) {
			return nil, fmt.Errorf("required lists %q twice", s)
		}
		out = append(out, s)
	}
	return out, nil
}

func loadRef(v any) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("$ref must be a string, not %s", jsonTypeName(v))
	}
	name, ok := strings.CutPrefix(s, "#/$defs/")
	if !ok || name == "" || strings.ContainsAny(name, "/~%#") {
		return "", fmt.Errorf("$ref %q: only local references of the form \"#/$defs/NAME\" are supported", s)
	}
	return name, nil
}

// loadCount reads a non-negative integer keyword (minLength, maxItems, ...).
func loadCount(kw string, v any) (int, error) {
	num, ok := v.(json.Number)
	if ok {
		d, ok := parseNumber(string(num))
		if ok && d.isInt() && !d.neg {
			if n, err := strconv.Atoi(d.String()); err == nil {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("%s must be a non-negative integer, not %s", kw, display(v))
}

// loadBound reads minimum or maximum.
func loadBound(kw string, v any) (*big.Rat, error) {
	if num, ok := v.(json.Number); ok {
		if r, ok := numberRat(num); ok {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%s must be a number of modest exponent, not %s", kw, display(v))
}

// checkRefCycles refuses schemas where $ref, if, then or else lead back to
// the same schema without descending into the instance: checking would
// never end.
func checkRefCycles(all []*schemaNode) error {
	const (
		unseen = iota
		active
		done
	)
	state := map[*schemaNode]int{}
	var visit func(n *schemaNode) error
	visit = func(n *schemaNode) error {
		switch state[n] {
		case active:
			return fmt.Errorf("%s: $ref cycle: the schema refers to itself without descending into the template", n.loc)
		case done:
			return nil
		}
		state[n] = active
		for _, next := range []*schemaNode{n.ref, n.ifS, n.thenS, n.elseS} {
			if next != nil {
				if err := visit(next); err != nil {
					return err
				}
			}
		}
		state[n] = done
		return nil
	}
	for _, n := range all {
		if err := visit(n); err != nil {
			return err
		}
	}
	return nil
}

// validate checks doc, the generic form parseJSON returns, and returns one
// error per broken rule, unsorted; file names the template in them.
func (n *schemaNode) validate(file string, doc any) ValidationErrors {
	r := &schemaRun{file: file}
	n.check(r, doc, "")
	return r.errs
}

// valid reports whether v satisfies n, for if.
func (n *schemaNode) valid(v any) bool {
	r := &schemaRun{quiet: true}
	n.check(r, v, "")
	return !r.failed
}

type schemaRun struct {
	file   string
	errs   ValidationErrors
	quiet  bool // only failed matters (an if); no errors are built
	failed bool
}

// fail records a broken rule. msg is only called when the error is kept.
func (r *schemaRun) fail(path, rule string, msg func() string) {
	r.failed = true
	if r.quiet {
		return
	}
	r.errs = append(r.errs, ValidationError{File: r.file, Path: path, Rule: rule, Message: msg()})
}

// check applies n to v, found at the pointer at. As in draft 2020-12
// implementations, a value of the wrong type, or one that fails const or
// enum, is reported for that alone: the other keywords of n are not tried.
func (n *schemaNode) check(r *schemaRun, v any, at string) {
	if n.always != nil {
		if !*n.always {
			r.fail(at, "not_allowed", func() string { return "not allowed here" })
		}
		return
	}
	if n.types != nil && !hasType(n.types, v) {
		r.fail(at, "type", func() string {
			return fmt.Sprintf("got %s, want %s", jsonTypeName(v), strings.Join(n.types, " or "))
		})
		return
	}
	if n.hasConst && !jsonEqual(v, n.constVal) {
		r.fail(at, "const", func() string { return constMessage(n.constVal) })
		return
	}
	if n.hasEnum && !slices.ContainsFunc(n.enum, func(w any) bool { return jsonEqual(v, w) }) {
		r.fail(at, "enum", func() string {
			want := make([]string, len(n.enum))
			for i, w := range n.enum {
				want[i] = fmt.Sprintf("%q", fmt.Sprint(w))
			}
			return fmt.Sprintf("got %s, want one of %s", display(v), strings.Join(want, ", "))
		})
		return
	}
	if n.ref != nil {
		n.ref.check(r, v, at)
	}
	switch v := v.(type) {
	case map[string]any:
		n.checkObject(r, v, at)
	case []any:
		n.checkArray(r, v, at)
	case string:
		n.checkString(r, v, at)
	case json.Number:
		n.checkNumber(r, v, at)
	}
	if n.ifS != nil {
		if n.ifS.valid(v) {
			if n.thenS != nil {
				n.thenS.check(r, v, at)
			}
		} else if n.elseS != nil {
			n.elseS.check(r, v, at)
		}
	}
}

func (n *schemaNode) checkObject(r *schemaRun, obj map[string]any, at string) {
	for _, name := range n.required {
		if _, ok := obj[name]; !ok {
			r.fail(at+"/"+escapePointer(name), "required", func() string { return "missing required field" })
		}
	}
	if n.properties == nil && n.additional == nil {
		return
	}
	for _, name := range slices.Sorted(maps.Keys(obj)) {
		sub, ok := n.properties[name]
		if !ok {
			sub = n.additional
		}
		switch {
		case sub == nil:
		case sub == n.additional && sub.always != nil && !*sub.always:
			r.fail(at+"/"+escapePointer(name), "additionalProperties", func() string { return "unknown field" })
		default:
			sub.check(r, obj[name], at+"/"+escapePointer(name))
		}
		if r.quiet && r.failed {
			return
		}
	}
}

func (n *schemaNode) checkArray(r *schemaRun, arr []any, at string) {
	if n.minItems >= 0 && len(arr) < n.minItems {
		r.fail(at, "minItems", func() string {
			return fmt.Sprintf("minItems: got %s, want %s", groupDigits(len(arr)), groupDigits(n.minItems))
		})
	}
	if n.maxItems >= 0 && len(arr) > n.maxItems {
		r.fail(at, "maxItems", func() string {
			return fmt.Sprintf("maxItems: got %s, want %s", groupDigits(len(arr)), groupDigits(n.maxItems))
		})
	}
	if n.uniqueItems {
		if i, j, ok := firstDuplicate(arr); ok {
			r.fail(at, "uniqueItems", func() string {
				return fmt.Sprintf("items at %s and %s are equal", groupDigits(i), groupDigits(j))
			})
		}
	}
	if n.items != nil {
		for i, x := range arr {
			n.items.check(r, x, at+"/"+strconv.Itoa(i))
			if r.quiet && r.failed {
				return
			}
		}
	}
}

func (n *schemaNode) checkString(r *schemaRun, s string, at string) {
	if n.minLength >= 0 || n.maxLength >= 0 {
		runes := utf8.RuneCountInString(s)
		if n.minLength >= 0 && runes < n.minLength {
			r.fail(at, "minLength", func() string {
				return fmt.Sprintf("minLength: got %s, want %s", groupDigits(runes), groupDigits(n.minLength))
			})
		}
		if n.maxLength >= 0 && runes > n.maxLength {
			r.fail(at, "maxLength", func() string {
				return fmt.Sprintf("maxLength: got %s, want %s", groupDigits(runes), groupDigits(n.maxLength))
			})
		}
	}
	if n.pattern != nil && !n.pattern.MatchString(s) {
		r.fail(at, "pattern", func() string {
			return fmt.Sprintf("%s does not match pattern %s", quote(s), quote(n.pattern.String()))
		})
	}
}

func (n *schemaNode) checkNumber(r *schemaRun, num json.Number, at string) {
	if n.minimum == nil && n.maximum == nil {
		return
	}
	got, ok := numberRat(num)
	if !ok {
		// Only reachable without "type": "integer" beside the bound, which
		// refuses such a number first.
		rule := "minimum"
		if n.minimum == nil {
			rule = "maximum"
		}
		r.fail(at, rule, func() string { return fmt.Sprintf("got %s, a number too large to compare", num) })
		return
	}
	if n.minimum != nil && got.Cmp(n.minimum) < 0 {
		r.fail(at, "minimum", func() string {
			if n.minimum.Cmp(big.NewRat(1, 1)) == 0 {
				return fmt.Sprintf("must be a positive integer, got %s", got.RatString())
			}
			return fmt.Sprintf("must be at least %s, got %s", n.minimum.RatString(), got.RatString())
		})
	}
	if n.maximum != nil && got.Cmp(n.maximum) > 0 {
		r.fail(at, "maximum", func() string {
			return fmt.Sprintf("must be at most %s, got %s", n.maximum.RatString(), got.RatString())
		})
	}
}

// jsonTypeName is the JSON Schema type of a generic JSON value; a number is
// "number" even when it is an integer.
func jsonTypeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func hasType(types []string, v any) bool {
	t := jsonTypeName(v)
	for _, want := range types {
		if want == t {
			return true
		}
		if want == "integer" && t == "number" {
			if d, ok := parseNumber(string(v.(json.Number))); ok && d.isInt() {
				return true
			}
		}
	}
	return false
}

// decimal is a JSON number held exactly: digits × 10^exp, digits without
// leading or trailing zeros ("" for zero, which is never negative).
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

func (d decimal) isInt() bool { return d.digits == "" || d.exp >= 0 }

// String writes an integral d in full; callers only use it on small ones.
func (d decimal) String() string {
	if d.digits == "" {
		return "0"
	}
	s := d.digits + strings.Repeat("0", int(max(d.exp, 0)))
	if d.neg {
		s = "-" + s
	}
	return s
}

// maxExp bounds the exponent of the numbers compared, as math/big does:
// big.Rat refuses to build a number whose decimal exponent, once the
// fraction digits are counted, is beyond ±10^6, and refuses an exponent
// that does not fit in 64 bits. Such a number is not an integer and equals
// nothing, not even itself; full JSON Schema implementations built on
// big.Rat do the same, and it keeps a hostile 1e999999999 cheap.
const maxExp = 1_000_000

// parseNumber reads a JSON number exactly, without computing powers of ten.
// ok is false when the text is not a JSON number or its exponent is beyond
// maxExp.
func parseNumber(s string) (d decimal, ok bool) {
	i := 0
	if i < len(s) && s[i] == '-' {
		d.neg = true
		i++
	}
	start := i
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart := s[start:i]
	if intPart == "" {
		return decimal{}, false
	}
	var frac string
	if i < len(s) && s[i] == '.' {
		i++
		fs := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if frac = s[fs:i]; frac == "" {
			return decimal{}, false
		}
	}
	var e int64
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		es := i
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		ds := i
		for i < len(s) && isDigit(s[i]) {
			i++
		}
		if i == ds {
			return decimal{}, false
		}
		var err error
		if e, err = strconv.ParseInt(s[es:i], 10, 64); err != nil {
			return decimal{}, false
		}
	}
	if i != len(s) {
		return decimal{}, false
	}
	mant := strings.TrimLeft(intPart+frac, "0")
	if mant == "" {
		return decimal{}, true
	}
	if e < -(1 << 62) {
		return decimal{}, false
	}
	exp := e - int64(len(frac))
	if exp > maxExp || exp < -maxExp {
		return decimal{}, false
	}
	trimmed := strings.TrimRight(mant, "0")
	d.digits = trimmed
	d.exp = exp + int64(len(mant)-len(trimmed))
	return d, true
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// numberRat converts a JSON number to an exact big.Rat; ok is false beyond
// maxExp (see parseNumber).
func numberRat(num json.Number) (*big.Rat, bool) {
	if _, ok := parseNumber(string(num)); !ok {
		return nil, false
	}
	return new(big.Rat).SetString(string(num))
}

// jsonEqual is JSON Schema equality: numbers by value (1, 1.0 and 1e0 are
// equal), objects regardless of member order.
func jsonEqual(a, b any) bool {
	switch a := a.(type) {
	case nil:
		return b == nil
	case bool:
		b, ok := b.(bool)
		return ok && a == b
	case string:
		b, ok := b.(string)
		return ok && a == b
	case json.Number:
		b, ok := b.(json.Number)
		if !ok {
			return false
		}
		da, oka := parseNumber(string(a))
		db, okb := parseNumber(string(b))
		return oka && okb && da == db
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !jsonEqual(a[i], b[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, va := range a {
			vb, ok := b[k]
			if !ok || !jsonEqual(va, vb) {
				return false
			}
		}
		return true
	}
	return false
}

// firstDuplicate finds the first item equal to an earlier one: i is the
// earlier, j the later. It runs in linear time whatever the array.
func firstDuplicate(arr []any) (i, j int, ok bool) {
	if len(arr) < 2 {
		return 0, 0, false
	}
	seen := make(map[string]int, len(arr))
	var b strings.Builder
	for j, x := range arr {
		b.Reset()
		if !canonicalKey(&b, x) {
			continue // holds a number that equals nothing
		}
		k := b.String()
		if i, dup := seen[k]; dup {
			return i, j, true
		}
		seen[k] = j
	}
	return 0, 0, false
}

// canonicalKey writes a text that is the same for two values exactly when
// jsonEqual holds. It returns false for a value that equals nothing.
func canonicalKey(b *strings.Builder, v any) bool {
	switch v := v.(type) {
	case nil:
		b.WriteByte('n')
	case bool:
		if v {
			b.WriteByte('t')
		} else {
			b.WriteByte('f')
		}
	case string:
		b.WriteString(strconv.Quote(v))
	case json.Number:
		d, ok := parseNumber(string(v))
		if !ok {
			return false
		}
		b.WriteByte('d')
		if d.neg {
			b.WriteByte('-')
		}
		b.WriteString(d.digits)
		b.WriteByte('e')
		b.WriteString(strconv.FormatInt(d.exp, 10))
		b.WriteByte(';')
	case []any:
		b.WriteByte('[')
		for _, x := range v {
			if !canonicalKey(b, x) {
				return false
			}
			b.WriteByte(',')
		}
		b.WriteByte(']')
	case map[string]any:
		b.WriteByte('{')
		for _, k := range slices.Sorted(maps.Keys(v)) {
			b.WriteString(strconv.Quote(k))
			b.WriteByte(':')
			if !canonicalKey(b, v[k]) {
				return false
			}
			b.WriteByte(',')
		}
		b.WriteByte('}')
	default:
		return false
	}
	return true
}

// constMessage, quote and groupDigits keep the wording the package reported
// when it used a JSON Schema library, so that reports and golden files stay
// the same: strings in single quotes, counts with thousands separators.
func constMessage(want any) string {
	switch want := want.(type) {
	case []any, map[string]any:
		return "'const' failed"
	case string:
		return "value must be " + quote(want)
	default:
		return fmt.Sprintf("value must be %v", want)
	}
}

// quote puts s in single quotes, escaped as Go escapes a string.
func quote(s string) string {
	s = strconv.Quote(s)
	s = strings.ReplaceAll(s, `\"`, `"`)
	s = strings.ReplaceAll(s, `'`, `\'`)
	return "'" + s[1:len(s)-1] + "'"
}

// groupDigits writes n in decimal with a comma every three digits.
func groupDigits(n int) string {
	s := strconv.Itoa(n)
	sign := ""
	if n < 0 {
		sign, s = "-", s[1:]
	}
	if len(s) <= 3 {
		return sign + s
	}
	var b strings.Builder
	b.WriteString(sign)
	head := len(s) % 3
	if head > 0 {
		b.WriteString(s[:head])
	}
	for k := head; k < len(s); k += 3 {
		if b.Len() > len(sign) {
			b.WriteByte(',')
		}
		b.WriteString(s[k : k+3])
	}
	return b.String()
}
