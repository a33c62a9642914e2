package agent

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// naiveSummary is the definition foldSummary must agree with: every dropped
// message's line appended to the old summary, the last maxSummary bytes kept.
func naiveSummary(old string, dropped []Message) string {
	for _, m := range dropped {
		old += summarize(m)
	}
	if len(old) > maxSummary {
		old = old[len(old)-maxSummary:]
	}
	for len(old) > 0 && !utf8.RuneStart(old[0]) {
		old = old[1:]
	}
	return old
}

func messages(n int, content string) []Message {
	ms := make([]Message, n)
	for i := range ms {
		ms[i] = Message{Role: "user", Content: fmt.Sprintf("%s %d", content, i), TaskID: fmt.Sprint("t", i)}
	}
	return ms
}

func TestFoldSummary(t *testing.T) {
	long := strings.Repeat("x", 3000)
	for _, tc := range []struct {
		name    string
		old     string
		dropped []Message
	}{
		{"nothing old", "", messages(3, "hello")},
		{"old kept whole", "[a user] earlier\n", messages(2, "hello")},
		{"old cut", long, messages(5, "hello")},
		{"dropped alone overflow", "old\n", messages(500, "hello")},
		{"one huge message", "old\n", []Message{{Role: "assistant", Content: long}}},
		{"multibyte at the cut", strings.Repeat("é", 1500), messages(1, "日本語のメッセージ")},
		{"multibyte content cut at 80", "", []Message{{Role: "user", Content: strings.Repeat("é", 100)}}},
		{"none dropped", "keep\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, want := foldSummary(tc.old, tc.dropped), naiveSummary(tc.old, tc.dropped)
			if got != want {
				t.Fatalf("foldSummary:\n got %q\nwant %q", got, want)
			}
			if len(got) > maxSummary || !utf8.ValidString(got) {
				t.Fatalf("summary of %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

// Folding many dropped messages at once costs what the kept tail costs, not
// what all of them cost: hydrating an agent 10,000 messages over its budget
// must not allocate in proportion to the square of that.
func TestFoldSummaryIsLinear(t *testing.T) {
	dropped := messages(10000, strings.Repeat("m", 60))
	allocs := testing.AllocsPerRun(5, func() { _ = foldSummary("previous summary\n", dropped) })
	if allocs > 200 {
		t.Fatalf("foldSummary of 10,000 messages made %.0f allocations; it should stop once the summary is full", allocs)
	}
}

func TestSummarizeCutsAtCharacter(t *testing.T) {
	got := summarize(Message{Role: "user", Content: strings.Repeat("a", 79) + "日本"})
	if !utf8.ValidString(got) || !strings.Contains(got, "…") {
		t.Fatalf("summarize = %q", got)
	}
}
