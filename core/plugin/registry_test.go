package plugin

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestRegisterPanics(t *testing.T) {
	open := func(context.Context, *url.URL, Env) (Storage, error) { return nil, nil }
	Register(Info{ID: "storage.testonly", New: StorageOpener(open)})
	cases := []struct {
		name string
		info Info
	}{
		{"no dot", Info{ID: "storage"}},
		{"empty name", Info{ID: "storage."}},
		{"unknown kind", Info{ID: "gadget.x"}},
		{"storage without opener", Info{ID: "storage.x"}},
		{"duplicate", Info{ID: "storage.testonly", New: StorageOpener(open)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("Register did not panic")
				}
			}()
			Register(tc.info)
		})
	}
}

func TestOpenStorageErrors(t *testing.T) {
	cases := []struct{ url, want string }{
		{"/no/scheme", "has no scheme"},
		{"nosuch:///x", `no storage plugin for scheme "nosuch"`},
		{"://bad", "missing protocol scheme"},
	}
	for _, tc := range cases {
		_, err := OpenStorage(context.Background(), tc.url, Env{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenStorage(%q) = %v, want %q", tc.url, err, tc.want)
		}
	}
}

// TestOmitted: a store a build tag left out is refused with an error that
// names the tag, and cannot also be registered.
func TestOmitted(t *testing.T) {
	Omit("storage.testomitted", "notestomitted")
	_, err := OpenStorage(context.Background(), "testomitted:///x", Env{})
	if !errors.Is(err, ErrNotCompiledIn) || !strings.Contains(err.Error(), "-tags notestomitted") {
		t.Fatalf("OpenStorage of an omitted store: %v", err)
	}
	if got := Omitted()["storage.testomitted"]; got != "notestomitted" {
		t.Fatalf("Omitted() = %q", got)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("registering an omitted plugin did not panic")
			}
		}()
		Register(Info{ID: "storage.testomitted", New: StorageOpener(func(context.Context, *url.URL, Env) (Storage, error) { return nil, nil })})
	}()
	Omit("memory.testomitted", "notestomitted")
	if _, err := OpenMemory(context.Background(), "testomitted://", Env{}); !errors.Is(err, ErrNotCompiledIn) ||
		!strings.Contains(err.Error(), "the testomitted memory engine is not compiled into this build (built with -tags notestomitted") {
		t.Fatalf("OpenMemory of an omitted engine: %v", err)
	}
	if _, err := OpenMemory(context.Background(), "nosuchengine://", Env{}); errors.Is(err, ErrNotCompiledIn) || !strings.Contains(err.Error(), `no memory plugin for scheme "nosuchengine"`) {
		t.Fatalf("OpenMemory of an unknown engine: %v", err)
	}
	err = NotCompiledIn("session continuity", "nosqlite")
	if !errors.Is(err, ErrNotCompiledIn) || err.Error() != "session continuity is not compiled into this build (built with -tags nosqlite); use the standard build, which has it" {
		t.Fatalf("NotCompiledIn: %v", err)
	}
}

func TestURLPath(t *testing.T) {
	cases := map[string]string{
		"bbolt:///var/lib/x": "/var/lib/x",
		"bbolt://rel/dir":    "rel/dir",
		"bbolt://":           "",
	}
	for in, want := range cases {
		u, _ := url.Parse(in)
		if got := URLPath(u); got != want {
			t.Errorf("URLPath(%q) = %q, want %q", in, got, want)
		}
	}
}
