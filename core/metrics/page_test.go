package metrics

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
)

func TestPage(t *testing.T) {
	p := NewPage()
	p.BuildInfo("1.2.3", "abc123")
	p.Gauge("openstarry_boot_phase_duration_seconds", 0.25, "phase", "3", "name", "ma\"ster")
	p.Gauge("openstarry_boot_phase_duration_seconds", 1, "phase", "1", "name", "infrastructure")
	p.Counter("openstarry_agent_ticks_total", 1234567, "agent", "a")
	p.Runtime()
	var b bytes.Buffer
	p.Render(&b)
	out := b.String()
	for _, tc := range []struct{ name, want string }{
		{"build info", `openstarry_build_info{version="1.2.3",revision="abc123",goversion="` + runtime.Version() +
			`",goos="` + runtime.GOOS + `",goarch="` + runtime.GOARCH + `"} 1`},
		{"labels in the order given, escaped", `openstarry_boot_phase_duration_seconds{phase="3",name="ma\"ster"} 0.25`},
		{"integers as integers", `openstarry_agent_ticks_total{agent="a"} 1234567`},
		{"gauge type", "# TYPE openstarry_boot_phase_duration_seconds gauge"},
		{"counter type", "# TYPE openstarry_agent_ticks_total counter"},
		{"go runtime", "go_goroutines "},
		{"process", "process_resident_memory_bytes "},
	} {
		if !strings.Contains(out, tc.want) {
			t.Errorf("%s: no %q in\n%s", tc.name, tc.want, out)
		}
	}
	// No empty # HELP line: a family has its text, or none.
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "#" && f[1] == "HELP" {
			t.Errorf("empty help line %q", line)
		}
	}
	if !strings.Contains(out, "# HELP openstarry_boot_phase_duration_seconds How long each of the four boot phases took.\n") {
		t.Errorf("no help text for openstarry_boot_phase_duration_seconds")
	}
	if n := strings.Count(out, "# TYPE openstarry_boot_phase_duration_seconds "); n != 1 {
		t.Errorf("# TYPE of a family written %d times", n)
	}
}

func TestBuildInfoRevisionFallback(t *testing.T) {
	p := NewPage()
	p.BuildInfo("v", "none")
	var b bytes.Buffer
	p.Render(&b)
	if strings.Contains(b.String(), `revision="none"`) || !strings.Contains(b.String(), `revision="`) {
		t.Fatalf("revision not taken from the build: %s", b.String())
	}
}

func TestWriteLabelled(t *testing.T) {
	in := "# HELP openstarry_agent_x_seconds\n# TYPE openstarry_agent_x_seconds histogram\nopenstarry_agent_x_seconds_bucket{le=\"1\"} 2\nopenstarry_agent_x_seconds_count 2\n"
	var b bytes.Buffer
	WriteLabelled(&b, "agent", []Labelled{
		{Value: "w", Families: Families(strings.NewReader(in), "openstarry_agent_")},
		{Value: "m", Families: Families(strings.NewReader(in), "openstarry_agent_")},
	})
	want := "# TYPE openstarry_agent_x_seconds histogram\n" +
		"openstarry_agent_x_seconds_bucket{agent=\"m\",le=\"1\"} 2\nopenstarry_agent_x_seconds_count{agent=\"m\"} 2\n" +
		"openstarry_agent_x_seconds_bucket{agent=\"w\",le=\"1\"} 2\nopenstarry_agent_x_seconds_count{agent=\"w\"} 2\n"
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}
}
