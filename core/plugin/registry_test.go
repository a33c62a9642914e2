package plugin

import (
	"context"
	"net/url"
	"strings"
	"testing"
)

func TestRegisterPanics(t *testing.T) {
	open := func(context.Context, *url.URL, Env) (Storage, error) { return nil, nil }
	Register(Info{ID: "storage.testonly", OpenStorage: open})
	cases := []struct {
		name string
		info Info
	}{
		{"no dot", Info{ID: "storage"}},
		{"empty name", Info{ID: "storage."}},
		{"unknown kind", Info{ID: "gadget.x"}},
		{"storage without opener", Info{ID: "storage.x"}},
		{"duplicate", Info{ID: "storage.testonly", OpenStorage: open}},
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
