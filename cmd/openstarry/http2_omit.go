//go:build nethttpomithttp2

package main

// httpProtocols is what version says of the HTTP stack of a build made
// with the standard library's nethttpomithttp2 tag (the small build):
// servers and clients speak HTTP/1.1, which every peer openstarry talks to
// accepts; TLS negotiates it instead of HTTP/2.
const httpProtocols = "HTTP/1.1 only (nethttpomithttp2)"
