package procstat

import (
	"strings"
	"testing"
)

// TestParseRollup: the fields are summed in bytes, and a file without one
// of them, or with a number that is not one, is an error.
func TestParseRollup(t *testing.T) {
	const good = `00400000-7ffc2beba000 ---p 00000000 00:00 0                              [rollup]
Rss:               15300 kB
Pss:                8986 kB
Shared_Clean:          8 kB
Shared_Dirty:      12612 kB
Private_Clean:        16 kB
Private_Dirty:      2664 kB
Anonymous:          2472 kB
`
	m, err := parseRollup([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Memory{Rss: 15300 << 10, Private: 2680 << 10, Shared: 12620 << 10, Anonymous: 2472 << 10}); m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	for _, bad := range []string{
		strings.Replace(good, "Shared_Dirty:      12612 kB\n", "", 1),
		strings.Replace(good, "2664", "26x4", 1),
		"",
	} {
		if _, err := parseRollup([]byte(bad)); err == nil {
			t.Errorf("no error for\n%s", bad)
		}
	}
}
