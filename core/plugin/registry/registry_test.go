package registry

import (
	"strings"
	"testing"
)

type opener func() int

// TestRegisterChecks: a plugin's New must be of its kind's declared type,
// and not a nil one; a kind is declared once; Without hides a plugin
// until restored.
func TestRegisterChecks(t *testing.T) {
	DeclareKind("testkind", "registry.opener", Is[opener])
	Register(Info{ID: "testkind.good", New: opener(func() int { return 1 })})
	for _, tc := range []struct {
		name string
		f    func()
		want string
	}{
		{"wrong type", func() { Register(Info{ID: "testkind.bad", New: func() int { return 1 }}) }, "has no New of its kind's type registry.opener"},
		{"nil func", func() { Register(Info{ID: "testkind.nil", New: opener(nil)}) }, "has no New"},
		{"no New", func() { Register(Info{ID: "testkind.none"}) }, "has no New"},
		{"undeclared kind", func() { Register(Info{ID: "nokind.x", New: opener(func() int { return 0 })}) }, `unknown kind "nokind"`},
		{"duplicate", func() { Register(Info{ID: "testkind.good", New: opener(func() int { return 2 })}) }, "registered twice"},
		{"kind twice", func() { DeclareKind("testkind", "x", Is[opener]) }, "declared twice"},
		{"dotted kind", func() { DeclareKind("a.b", "x", Is[opener]) }, "malformed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(r.(string), tc.want) {
					t.Fatalf("panic %v, want one saying %q", r, tc.want)
				}
			}()
			tc.f()
		})
	}
	restore := Without("testkind.good")
	if _, ok := Lookup("testkind.good"); ok {
		t.Fatal("Without left the plugin in")
	}
	Register(Info{ID: "testkind.good", New: opener(func() int { return 3 })})
	restore()
	info, ok := Lookup("testkind.good")
	if !ok || info.New.(opener)() != 1 {
		t.Fatalf("after restore: %v %v, want the first registration back", info, ok)
	}
	if got := List("testkind"); len(got) != 1 || got[0].Name() != "good" || got[0].Kind() != "testkind" {
		t.Fatalf("List = %v", got)
	}
}
