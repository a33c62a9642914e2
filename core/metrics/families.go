package metrics

import (
	"bufio"
	"io"
	"sort"
	"strings"
)

// Family is one metric family read from an agent's exposition: its type,
// help and sample lines as the agent wrote them.
type Family struct {
	Type, Help string
	Lines      []string
}

// Families groups an exposition by family, keeping only the families
// whose names start with prefix (a histogram's _bucket, _sum and _count
// lines go to their family). It reads at most what r gives and never fails:
// a line it does not understand is skipped.
func Families(r io.Reader, prefix string) map[string]*Family {
	out := map[string]*Family{}
	get := func(n string) *Family {
		if out[n] == nil {
			out[n] = &Family{Type: "untyped"}
		}
		return out[n]
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if n, t, ok := strings.Cut(rest, " "); ok && strings.HasPrefix(n, prefix) {
				get(n).Type = t
			}
			continue
		}
		if rest, ok := strings.CutPrefix(line, "# HELP "); ok {
			if n, h, _ := strings.Cut(rest, " "); strings.HasPrefix(n, prefix) {
				get(n).Help = h
			}
			continue
		}
		if line[0] == '#' {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		fam := name
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if f, ok := out[base]; ok && (f.Type == "histogram" || f.Type == "summary") {
					fam = base
				}
			}
		}
		get(fam).Lines = append(get(fam).Lines, line)
	}
	return out
}

// Labelled is what one source (an agent) exposed: its families and the
// label value that names it.
type Labelled struct {
	Value    string
	Families map[string]*Family
}

// WriteLabelled writes the families of every source, each family once with
// its # HELP and # TYPE lines, and each sample with label="Value" first.
// Sources are written in the order of their values.
func WriteLabelled(w io.Writer, label string, srcs []Labelled) {
	sort.Slice(srcs, func(i, j int) bool { return srcs[i].Value < srcs[j].Value })
	first := map[string]*Family{}
	for _, s := range srcs {
		for n, f := range s.Families {
			if first[n] == nil {
				first[n] = f
			}
		}
	}
	names := make([]string, 0, len(first))
	for n := range first {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, n := range names {
		if first[n].Help != "" {
			b.WriteString("# HELP " + n + " " + first[n].Help + "\n")
		}
		b.WriteString("# TYPE " + n + " " + first[n].Type + "\n")
		for _, s := range srcs {
			if f := s.Families[n]; f != nil {
				for _, l := range f.Lines {
					b.WriteString(AddLabel(l, label, s.Value))
					b.WriteByte('\n')
				}
			}
		}
	}
	_, _ = io.WriteString(w, b.String())
}

// AddLabel inserts k="v" first in a sample line's labels.
func AddLabel(line, k, v string) string {
	lbl := k + `="` + escapeLabel(v) + `"`
	if i := strings.IndexByte(line, '{'); i >= 0 {
		if strings.HasPrefix(line[i+1:], "}") {
			return line[:i+1] + lbl + line[i+1:]
		}
		return line[:i+1] + lbl + "," + line[i+1:]
	}
	i := strings.IndexByte(line, ' ')
	if i < 0 {
		return line
	}
	return line[:i] + "{" + lbl + "}" + line[i:]
}
