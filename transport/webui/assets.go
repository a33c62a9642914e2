package webui

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"
)

// The script and the style sheet are embedded gzipped (static/*.gz, made
// from static/app.js and static/app.css by `go generate`; a test checks
// that they decode to those files). The binary carries 12 KiB instead of
// 40, which kept the Windows binary under its 20 MiB budget, and browsers
// get the same bytes; a client that does not take gzip gets them decoded.
//
//go:generate go run gen_assets.go
//go:embed static/index.html static/icon.svg static/*.gz
var static embed.FS

// asset is one embedded file, ready to serve in both encodings. Its gzip
// encoding, unless embedded, is made at its first use, not at start:
// compressing the UI at its best level costs a cold daemon about 20 ms of
// processor time before the master is spawned, for a page few boots ever
// serve. An asset embedded gzipped is decoded at its first use without
// gzip, likewise.
type asset struct {
	name  string // "app.js"
	ctype string
	hash  string // first 16 hex digits of the SHA-256 of what is embedded

	rawOnce sync.Once
	raw     []byte // see plain
	pre     []byte // the embedded gzip encoding, or nil

	gzOnce sync.Once
	gzData []byte // see gzipped
}

// plain returns the asset's content.
func (f *asset) plain() []byte {
	f.rawOnce.Do(func() {
		if f.raw != nil || f.pre == nil {
			return
		}
		zr, err := gzip.NewReader(bytes.NewReader(f.pre))
		if err != nil {
			return // checked by TestEmbeddedGzipCurrent
		}
		f.raw, _ = io.ReadAll(zr)
	})
	return f.raw
}

// gzipped returns the gzip encoding of the asset, nil when it is not
// smaller.
func (f *asset) gzipped() []byte {
	if f.pre != nil {
		return f.pre
	}
	f.gzOnce.Do(func() {
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			return // a constant valid level: cannot fail
		}
		_, _ = zw.Write(f.raw) // a bytes.Buffer does not fail
		if zw.Close() == nil && buf.Len() < len(f.raw) {
			f.gzData = buf.Bytes()
		}
	})
	return f.gzData
}

// assets holds the embedded files, built once by loadAssets.
type assets struct {
	index *asset            // index.html with the assets' hashed URLs
	files map[string]*asset // by name under /ui/
}

// loadAssets reads, hashes and compresses the embedded files, and writes
// each asset's hash into the page's URLs ("/ui/app.js" → "/ui/app.js?v=HASH")
// so that the browser may keep them for a year.
func loadAssets(fsys fs.FS) (*assets, error) {
	a := &assets{files: map[string]*asset{}}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var page []byte
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, err
		}
		if e.Name() == "index.html" {
			page = data
			continue
		}
		name, gz := strings.CutSuffix(e.Name(), ".gz")
		if gz {
			a.files[name], err = newAsset(name, nil, data)
		} else {
			a.files[name], err = newAsset(name, data, nil)
		}
		if err != nil {
			return nil, err
		}
	}
	if page == nil {
		return nil, fmt.Errorf("webui: no index.html")
	}
	for name, f := range a.files {
		page = bytes.ReplaceAll(page, []byte(`"/ui/`+name+`"`), []byte(`"/ui/`+name+`?v=`+f.hash+`"`))
	}
	if a.index, err = newAsset("index.html", page, nil); err != nil {
		return nil, err
	}
	return a, nil
}

// newAsset makes the asset name from its content raw, or from its gzip
// encoding pre.
func newAsset(name string, raw, pre []byte) (*asset, error) {
	sum := sha256.Sum256(raw)
	if pre != nil {
		sum = sha256.Sum256(pre)
	}
	f := &asset{name: name, raw: raw, pre: pre, hash: hex.EncodeToString(sum[:8])}
	// The system's MIME table may lack these or differ; and reading it
	// (the first TypeByExtension loads every file of it) is left to the
	// other kinds.
	switch path.Ext(name) {
	case ".js":
		f.ctype = "text/javascript; charset=utf-8"
	case ".css":
		f.ctype = "text/css; charset=utf-8"
	case ".html":
		f.ctype = "text/html; charset=utf-8"
	case ".svg":
		f.ctype = "image/svg+xml"
	default:
		f.ctype = mime.TypeByExtension(path.Ext(name))
	}
	if f.ctype == "" {
		f.ctype = "application/octet-stream"
	}
	return f, nil
}

// CompressedSize is the size of the whole UI as a browser downloads it
// (gzip where it is smaller), in bytes.
func (a *assets) compressedSize() int {
	n := a.index.size(true)
	for _, f := range a.files {
		n += f.size(true)
	}
	return n
}

func (f *asset) size(gz bool) int {
	if gz && f.gzipped() != nil {
		return len(f.gzipped())
	}
	return len(f.plain())
}

// serve writes f, gzipped when the client accepts it, answering
// If-None-Match with 304. immutable marks a URL whose content never changes.
func (f *asset) serve(w http.ResponseWriter, r *http.Request, immutable bool) {
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("Vary", "Accept-Encoding")
	h.Set("X-Content-Type-Options", "nosniff")
	if immutable {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	var body []byte
	etag := `"` + f.hash + `"`
	if gz := f.gzipped(); gz != nil && acceptsGzip(r) {
		body, etag = gz, `"`+f.hash+`-gz"`
		h.Set("Content-Encoding", "gzip")
	} else {
		body = f.plain()
	}
	h.Set("ETag", etag)
	// ServeContent answers If-None-Match (304), HEAD and ranges.
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}

// acceptsGzip reports whether Accept-Encoding lists gzip with a non-zero
// quality.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if !strings.EqualFold(strings.TrimSpace(coding), "gzip") {
			continue
		}
		q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
		return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
	}
	return false
}
