package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

func TestOf(t *testing.T) {
	base := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain", base, Failure},
		{"coded", New(Locked, base), Locked},
		{"wrapped", fmt.Errorf("start: %w", New(2, base)), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.err); got != tc.want {
				t.Errorf("Of(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
	if err := New(Locked, base); err.Error() != "boom" || !errors.Is(err, base) {
		t.Errorf("New(%d, %v): message %q, unwraps %v", Locked, base, err.Error(), errors.Is(err, base))
	}
}
