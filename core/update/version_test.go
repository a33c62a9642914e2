package update

import (
	"errors"
	"testing"
)

func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		running, to string
		rollback    bool
		ok          bool
	}{
		{"2.0.0", "1.0.0", false, false},
		{"v2.0.0", "v1.9.9", false, false},
		{"2.0.0", "2.0.0-rc.1", false, false},
		{"2.0.0-rc.2", "2.0.0-rc.1", false, false},
		{"2.0.0-rc.10", "2.0.0-rc.9", false, false},
		{"1.10.0", "1.9.0", false, false},
		{"2.0.0", "dev", false, false},
		{"2.0.0", "1.0.0", true, true},
		{"2.0.0", "dev", true, true},
		{"2.0.0", "2.0.0", false, true},
		{"2.0.0", "2.0.1", false, true},
		{"2.0.0-rc.1", "2.0.0", false, true},
		{"2.0.0-alpha", "2.0.0-beta", false, true},
		{"2.0.0-rc.1", "2.0.0-rc.1.1", false, true},
		{"1.9.0", "1.10.0", false, true},
		{"v1.0.0-test", "v2.0.0-test", false, true},
		{"2.0.0+build.1", "2.0.0+build.0", false, true},
		{"dev", "1.0.0", false, true},
		{"dev", "dev", false, true},
		{"", "1.0.0", false, true},
	} {
		err := CheckVersion(tc.running, tc.to, tc.rollback)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrDowngrade)) {
			t.Errorf("CheckVersion(%q, %q, %v) = %v, want ok %v", tc.running, tc.to, tc.rollback, err, tc.ok)
		}
	}
}
