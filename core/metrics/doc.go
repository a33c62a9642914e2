// Package metrics owns the Prometheus exposition of the product, written
// by github.com/VictoriaMetrics/metrics: the daemon's page (a Page filled
// at each scrape), the Go runtime and process metrics, build_info, the
// agent process's save-latency histogram (Agent, the one family written
// here by hand), and what that library does not do, reading an agent's
// exposition back so that the daemon can serve its families with an agent
// label (Families, AddLabel).
//
// It imports neither the daemon nor the kernel's runtime: an agent process
// links it for its histogram without linking the daemon.
//
// Invariant: every family is written once, with its # TYPE line, and a
// sample's labels keep the order they were given in.
package metrics
