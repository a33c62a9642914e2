package metrics

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAgentHistogram(t *testing.T) {
	now := time.Unix(0, 0)
	m := NewAgent(func() time.Time { return now })
	for _, d := range []time.Duration{300 * time.Microsecond, 1500 * time.Microsecond, 40 * time.Millisecond, 10 * time.Second} {
		m.BeforeSave(nil)
		now = now.Add(d)
		m.AfterSave(nil)
	}
	w := httptest.NewRecorder()
	m.ServeHTTP(w, nil)
	body := w.Body.String()
	for _, want := range []string{
		`openstarry_agent_save_duration_seconds_bucket{le="0.0005"} 1`,
		`openstarry_agent_save_duration_seconds_bucket{le="0.002"} 2`,
		`openstarry_agent_save_duration_seconds_bucket{le="0.05"} 3`,
		`openstarry_agent_save_duration_seconds_bucket{le="5"} 3`,
		`openstarry_agent_save_duration_seconds_bucket{le="+Inf"} 4`,
		`openstarry_agent_save_duration_seconds_count 4`,
		`openstarry_agent_save_duration_seconds_sum 10.0418`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("missing %q in\n%s", want, body)
		}
	}
}

func TestFamiliesRelabel(t *testing.T) {
	in := "# HELP openstarry_agent_x_seconds h\n# TYPE openstarry_agent_x_seconds histogram\n" +
		"openstarry_agent_x_seconds_bucket{le=\"1\"} 2\nopenstarry_agent_x_seconds_sum 3\n" +
		"go_goroutines 5\nopenstarry_agent_y 1\n"
	f := Families(strings.NewReader(in), "openstarry_agent_")
	if len(f) != 2 || f["openstarry_agent_x_seconds"].Type != "histogram" || len(f["openstarry_agent_x_seconds"].Lines) != 2 || f["go_goroutines"] != nil {
		t.Fatalf("%+v", f)
	}
	for in, want := range map[string]string{
		`a{le="1"} 2`: `a{agent="m\"x",le="1"} 2`,
		`a{} 2`:       `a{agent="m\"x"} 2`,
		`a 2`:         `a{agent="m\"x"} 2`,
	} {
		if got := AddLabel(in, "agent", `m"x`); got != want {
			t.Errorf("AddLabel(%s) = %s, want %s", in, got, want)
		}
	}
}
