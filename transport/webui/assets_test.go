package webui

import (
	"bytes"
	"compress/gzip"
	"io"
	"testing"
)

// TestAssetsCompressedOnFirstUse: loading the UI compresses nothing (a
// daemon's boot does not pay for it); the first use of an asset's gzip
// encoding makes it, and it decodes to the asset.
func TestAssetsCompressedOnFirstUse(t *testing.T) {
	sub, err := fsSub()
	if err != nil {
		t.Fatal(err)
	}
	a, err := loadAssets(sub)
	if err != nil {
		t.Fatal(err)
	}
	all := []*asset{a.index}
	for _, f := range a.files {
		all = append(all, f)
	}
	for _, f := range all {
		if f.gzData != nil {
			t.Fatalf("%s compressed at load", f.name)
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
		if err != nil || !bytes.Equal(got, f.raw) {
			t.Fatalf("%s: the gzip encoding does not decode to the asset (%v)", f.name, err)
		}
		if len(gz) >= len(f.raw) {
			t.Fatalf("%s: kept a gzip encoding of %d bytes for %d raw", f.name, len(gz), len(f.raw))
		}
	}
	if a.files["app.js"].gzipped() == nil {
		t.Fatal("app.js is not served compressed")
	}
}
