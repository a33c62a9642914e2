package metrics

import (
	"bytes"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	vm "github.com/VictoriaMetrics/metrics"
)

// The library is github.com/VictoriaMetrics/metrics v1.35: later versions
// log a line from a package initialiser on every start of every command
// where the kernel keeps pressure stall information off (Debian's and
// Raspberry Pi OS's default).

func init() {
	// # HELP and # TYPE lines, which Prometheus uses for the type of a
	// family.
	vm.ExposeMetadata(true)
}

// ContentType is the media type of the text exposition.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Page is one exposition, filled for one scrape and written once. It is
// not safe for concurrent use.
type Page struct {
	set   *vm.Set
	after []func(io.Writer)
}

// NewPage returns an empty page.
func NewPage() *Page { return &Page{set: vm.NewSet()} }

// Gauge adds a sample of the gauge name; labels are name, value pairs,
// kept in their order.
func (p *Page) Gauge(name string, v float64, labels ...string) {
	p.set.GetOrCreateGauge(Name(name, labels...), nil).Set(v)
}

// Counter adds a sample of the counter name (its name ends in _total).
func (p *Page) Counter(name string, v uint64, labels ...string) {
	p.set.GetOrCreateCounter(Name(name, labels...)).Set(v)
}

// Runtime adds the Go runtime (go_*) and process (process_*) metrics of
// this process.
func (p *Page) Runtime() { p.after = append(p.after, vm.WriteProcessMetrics) }

// Then adds what w writes after the page's own samples.
func (p *Page) Then(w func(io.Writer)) { p.after = append(p.after, w) }

// Render writes the exposition: the samples, grouped by family and
// sorted, then what Runtime and Then added.
func (p *Page) Render(w io.Writer) {
	var b bytes.Buffer
	p.set.WritePrometheus(&b)
	for _, f := range p.after {
		f(&b)
	}
	withHelp(w, b.Bytes())
}

// BuildInfo adds openstarry_build_info with the version, the revision
// (from the build's VCS stamp when revision is empty), the Go version and
// the platform.
func (p *Page) BuildInfo(version, revision string) {
	if revision == "" || revision == "none" {
		revision = vcsRevision()
	}
	p.Gauge("openstarry_build_info", 1, "version", version, "revision", revision,
		"goversion", runtime.Version(), "goos", runtime.GOOS, "goarch", runtime.GOARCH)
}

func vcsRevision() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// Name returns a sample's name with its labels: name{k="v",...}, the
// values escaped, the labels in the order given.
func Name(name string, labels ...string) string {
	if len(labels) < 2 {
		return name
	}
	var b strings.Builder
	b.WriteString(name)
	b.WriteByte('{')
	for i := 0; i+1 < len(labels); i += 2 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(labels[i])
		b.WriteString(`="`)
		b.WriteString(escapeLabel(labels[i+1]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
