package design

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
)

func zeroLogger() zerolog.Logger { return zerolog.Nop() }

func TestResolveLocalOverEmbedded(t *testing.T) {
	dir := t.TempDir()
	// A local master that names the embedded worker, and a local-only helper.
	writeFiles(t, dir, map[string][]byte{
		"master.json": tmpl(t, "master", "master", withWorkers("worker", "helper"), withVersion("2.0.0")),
		"helper.json": tmpl(t, "helper", "worker"),
	})
	res := NewResolver(ResolverOptions{Dir: dir, Embedded: Shipped()})
	ctx := context.Background()

	for name, want := range map[string]struct{ source, version string }{
		"master": {SourceLocal, "2.0.0"},
		"helper": {SourceLocal, "1.0.0"},
		"worker": {SourceEmbedded, "1.0.0"},
		"echo":   {SourceEmbedded, "1.0.0"},
	} {
		r, err := res.Resolve(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if r.Source != want.source || r.Version != want.version || r.Template.Name != name || r.Digest != Digest(r.Raw) {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if err := res.Preflight(ctx); err != nil {
		t.Errorf("Preflight: %v", err)
	}

	_, err := res.Resolve(ctx, "nope")
	if !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "embedded") {
		t.Errorf("nope: %v", err)
	}
	if _, err := res.Resolve(ctx, "Not A Name"); !errors.Is(err, ErrInvalidTemplate) {
		t.Errorf("bad name: %v", err)
	}
}

// A broken local file is reported, not silently replaced by the embedded
// template of the same name; other templates still resolve.
func TestResolveBrokenLocalShadows(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"master.json": []byte(`{"name": "master"`)})
	res := NewResolver(ResolverOptions{Dir: dir, Embedded: Shipped()})
	_, err := res.Resolve(context.Background(), "master")
	var errs ValidationErrors
	if !errors.As(err, &errs) || !strings.Contains(err.Error(), filepath.Join(dir, "master.json")+": /: syntax") {
		t.Fatalf("err = %v", err)
	}
	if r, err := res.Resolve(context.Background(), "worker"); err != nil || r.Source != SourceEmbedded {
		t.Fatalf("worker: %v %v", r, err)
	}
	if err := res.Preflight(context.Background()); !errors.As(err, &errs) || len(errs) != 1 {
		t.Fatalf("Preflight = %v", err)
	}
}

func TestResolveWithoutDir(t *testing.T) {
	for _, dir := range []string{"", filepath.Join(t.TempDir(), "missing")} {
		r, err := NewResolver(ResolverOptions{Dir: dir, Embedded: Shipped()}).Resolve(context.Background(), "master")
		if err != nil || r.Source != SourceEmbedded || r.Location != "embedded:master.json" {
			t.Fatalf("dir %q: %+v %v", dir, r, err)
		}
	}
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	if _, err := NewResolver(ResolverOptions{Dir: file}).Resolve(context.Background(), "master"); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("dir is a file: %v", err)
	}
	if _, err := NewResolver(ResolverOptions{}).Resolve(context.Background(), "master"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("no source: %v", err)
	}
}

func TestResolveFile(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{
		"solo.json":  tmpl(t, "solo", "worker"),
		"other.json": tmpl(t, "solo", "worker"),
		"bad.json":   tmpl(t, "bad", "worker", func(m map[string]any) { delete(m, "tools") }),
	})
	res := NewResolver(ResolverOptions{Embedded: Shipped()})
	ctx := context.Background()
	r, err := res.Resolve(ctx, filepath.Join(dir, "solo.json"))
	if err != nil || r.Source != SourceLocal || r.Template.Name != "solo" || r.Location != filepath.Join(dir, "solo.json") {
		t.Fatalf("%+v %v", r, err)
	}
	if _, err := res.Resolve(ctx, filepath.Join(dir, "other.json")); err == nil || !strings.Contains(err.Error(), "/name: file_name") {
		t.Errorf("misnamed: %v", err)
	}
	if _, err := res.Resolve(ctx, filepath.Join(dir, "bad.json")); err == nil || !strings.Contains(err.Error(), "/tools: required") {
		t.Errorf("invalid: %v", err)
	}
	if _, err := res.Resolve(ctx, filepath.Join(dir, "gone.json")); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing: %v", err)
	}
	for _, s := range []string{"a.json", "./a", "dir/a", `dir\a`} {
		if !IsFile(s) {
			t.Errorf("IsFile(%q) = false", s)
		}
	}
	if IsFile("master") {
		t.Error("IsFile(master)")
	}
}

// With a design layer configured, names go there only: the local directory
// and the embedded set are not a fallback.
func TestResolveRemoteIgnoresLocal(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string][]byte{"master.json": tmpl(t, "master", "master", withVersion("9.9.9"))})
	e := newFenv(t)
	f := e.fetcher(t, refusedURL(t), func(o *Options) { o.Retries = -1 })
	res := NewResolver(ResolverOptions{Fetcher: f, Dir: dir, Embedded: Shipped()})
	if _, err := res.Resolve(context.Background(), "master"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if err := res.Preflight(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A file path is still a file path.
	r, err := res.Resolve(context.Background(), filepath.Join(dir, "master.json"))
	if err != nil || r.Version != "9.9.9" {
		t.Fatalf("%v %v", r, err)
	}
}

func TestVars(t *testing.T) {
	r, err := NewResolver(ResolverOptions{Embedded: Shipped()}).Resolve(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"template_name": "echo", "template_version": "1.0.0", "template_digest": r.Digest, "template_source": "embedded"}
	if !equalVars(r.Vars(), want) {
		t.Errorf("Vars = %v", r.Vars())
	}
	if !strings.HasPrefix(r.Digest, "sha256:") || len(r.Digest) != len("sha256:")+64 {
		t.Errorf("digest %q", r.Digest)
	}
}
