package backoff

import (
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second}
	for _, tc := range []struct {
		name string
		n    int
		r    float64
		want time.Duration
	}{
		{"first", 0, 0.5, 100 * time.Millisecond},
		{"doubles", 1, 0.5, 200 * time.Millisecond},
		{"again", 3, 0.5, 800 * time.Millisecond},
		{"capped", 4, 0.5, time.Second},
		{"no overflow", 1000, 0.5, time.Second},
		{"-20%", 0, 0, 80 * time.Millisecond},
		{"+20%", 0, 0.999999, 120 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p.Rand = func() float64 { return tc.r }
			if got := p.Delay(tc.n).Round(time.Millisecond); got != tc.want {
				t.Errorf("Delay(%d, r=%v) = %v, want %v", tc.n, tc.r, got, tc.want)
			}
		})
	}
}

func TestDelayBoundsWithRealRand(t *testing.T) {
	p := Policy{Initial: 200 * time.Millisecond, Max: 5 * time.Second}
	for n := range 10 {
		b := p.Base(n)
		for range 100 {
			if d := p.Delay(n); d < b*8/10 || d >= b*12/10 {
				t.Fatalf("Delay(%d) = %v, want [%v, %v)", n, d, b*8/10, b*12/10)
			}
		}
	}
}

func TestZeroPolicy(t *testing.T) {
	if d := (Policy{}).Delay(5); d != 0 {
		t.Fatalf("zero policy waits %v", d)
	}
	if d := (Policy{Initial: time.Hour}).Delay(62); d <= 0 {
		t.Fatalf("uncapped policy overflowed to %v", d)
	}
}
