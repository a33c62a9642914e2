package metrics

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzFamilies feeds the exposition reader arbitrary text: it never
// panics, keeps only the prefix's families, and what it keeps is written
// back with the label on every sample.
func FuzzFamilies(f *testing.F) {
	f.Add("# HELP openstarry_agent_x h\n# TYPE openstarry_agent_x histogram\nopenstarry_agent_x_bucket{le=\"1\"} 2\nopenstarry_agent_x_sum 1\n")
	f.Add("openstarry_agent_y 1\ngo_goroutines 5\n#\n# TYPE\n{\n")
	f.Fuzz(func(t *testing.T, in string) {
		fams := Families(strings.NewReader(in), "openstarry_agent_")
		for n := range fams {
			if !strings.HasPrefix(n, "openstarry_agent_") {
				t.Fatalf("family %q kept", n)
			}
		}
		var b bytes.Buffer
		WriteLabelled(&b, "agent", []Labelled{{Value: "a", Families: fams}})
	})
}
