//go:build ignore

// gen_assets writes static/app.js.gz and static/app.css.gz, the gzip
// encodings (best compression, no name, no time) of the script and the
// style sheet that the binary embeds: run `go generate ./transport/webui`
// after changing either. TestEmbeddedGzipCurrent fails until it is run.
package main

import (
	"bytes"
	"compress/gzip"
	"log"
	"os"
)

func main() {
	for _, name := range []string{"static/app.js", "static/app.css"} {
		src, err := os.ReadFile(name)
		if err != nil {
			log.Fatal(err)
		}
		var buf bytes.Buffer
		zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := zw.Write(src); err != nil {
			log.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(name+".gz", buf.Bytes(), 0o644); err != nil {
			log.Fatal(err)
		}
	}
}
