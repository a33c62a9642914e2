package webui

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// embedded loads the UI the binary embeds.
func embedded(t *testing.T) (fs.FS, *assets) {
	t.Helper()
	sub, err := fsSub()
	if err != nil {
		t.Fatal(err)
	}
	a, err := loadAssets(sub)
	if err != nil {
		t.Fatal(err)
	}
	return sub, a
}

// TestAssetsCompressedOnFirstUse: loading the UI compresses nothing (a
// daemon's boot does not pay for it); the first use of an asset's gzip
// encoding makes it, and it decodes to the asset.
func TestAssetsCompressedOnFirstUse(t *testing.T) {
	_, a := embedded(t)
	all := []*asset{a.index}
	for _, f := range a.files {
		all = append(all, f)
	}
	for _, f := range all {
		if f.gzData != nil {
			t.Fatalf("%s compressed at load", f.name)
		}
		if f.pre != nil && f.raw != nil {
			t.Fatalf("%s decoded at load", f.name)
		}
	}
	for _, f := range all {
		gz := f.gzipped()
		if gz == nil {
			continue // not smaller compressed
		}
		zr, err := gzip.NewReader(bytes.NewReader(gz))
		if err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
		got, err := io.ReadAll(zr)
		if err != nil || !bytes.Equal(got, f.plain()) {
			t.Fatalf("%s: the gzip encoding does not decode to the asset (%v)", f.name, err)
		}
		if len(gz) >= len(f.plain()) {
			t.Fatalf("%s: kept a gzip encoding of %d bytes for %d raw", f.name, len(gz), len(f.plain()))
		}
	}
	if a.files["app.js"].gzipped() == nil {
		t.Fatal("app.js is not served compressed")
	}
}

// TestEmbeddedGzipCurrent: the script and the style sheet are embedded as
// their gzip encodings; each decodes to its source in static/, so that an
// edit of the source without `go generate ./transport/webui` fails here.
func TestEmbeddedGzipCurrent(t *testing.T) {
	sub, a := embedded(t)
	for _, name := range []string{"app.js", "app.css"} {
		src, err := os.ReadFile(filepath.Join("static", name))
		if err != nil {
			t.Fatal(err)
		}
		f := a.files[name]
		if f == nil || f.pre == nil {
			t.Fatalf("%s is not embedded gzipped", name)
		}
		if !bytes.Equal(f.plain(), src) {
			t.Fatalf("static/%s.gz does not decode to static/%s: run go generate ./transport/webui", name, name)
		}
	}
	if _, err := fs.Stat(sub, "app.js"); err == nil {
		t.Fatal("app.js is embedded as it is as well as gzipped")
	}
}
