package logx

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestRing(t *testing.T) {
	r := NewRing(3)
	if got := r.Tail(5); len(got) != 0 {
		t.Fatalf("empty ring: %q", got)
	}
	fmt.Fprint(r, "a\nb\n")
	if got := r.Tail(5); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("tail = %q", got)
	}
	fmt.Fprint(r, "c\nd")
	fmt.Fprint(r, "e\nf\n") // "de" arrives in two writes
	if got := r.Tail(5); !slices.Equal(got, []string{"c", "de", "f"}) {
		t.Fatalf("tail = %q", got)
	}
	if got := r.Tail(1); !slices.Equal(got, []string{"f"}) {
		t.Fatalf("tail 1 = %q", got)
	}
	fmt.Fprint(r, strings.Repeat("x", MaxLine+10)+"\n")
	if got := r.Tail(1); len(got[0]) != MaxLine {
		t.Fatalf("long line kept %d bytes", len(got[0]))
	}
}
