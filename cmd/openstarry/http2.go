//go:build !nethttpomithttp2

package main

// httpProtocols is what version says of the HTTP stack: the standard
// library's, which negotiates HTTP/2 over TLS (the design server with a
// certificate, the clients of https:// model servers and webhooks).
const httpProtocols = "HTTP/1.1, HTTP/2"
