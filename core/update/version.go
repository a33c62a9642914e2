package update

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrDowngrade is returned for a candidate older than the running version
// when the update is not an explicit rollback.
var ErrDowngrade = errors.New("update older than the running version")

// semver is a parsed MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD], with or
// without a leading "v".
type semver struct {
	core [3]uint64
	pre  []string
}

func parseSemver(s string) (semver, bool) {
	var v semver
	s = strings.TrimPrefix(s, "v")
	s, _, _ = strings.Cut(s, "+")
	s, pre, hasPre := strings.Cut(s, "-")
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil || (len(p) > 1 && p[0] == '0') {
			return v, false
		}
		v.core[i] = n
	}
	if hasPre {
		if pre == "" {
			return v, false
		}
		v.pre = strings.Split(pre, ".")
		for _, id := range v.pre {
			if id == "" {
				return v, false
			}
		}
	}
	return v, true
}

// compare orders a and b as semantic versions do (2.0.0 > 2.0.0-rc.1 >
// 1.9.9).
func (a semver) compare(b semver) int {
	for i := range a.core {
		if a.core[i] != b.core[i] {
			if a.core[i] < b.core[i] {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(a.pre) == 0 && len(b.pre) == 0:
		return 0
	case len(a.pre) == 0:
		return 1
	case len(b.pre) == 0:
		return -1
	}
	for i := 0; i < len(a.pre) && i < len(b.pre); i++ {
		x, y := a.pre[i], b.pre[i]
		xn, xerr := strconv.ParseUint(x, 10, 64)
		yn, yerr := strconv.ParseUint(y, 10, 64)
		switch {
		case xerr == nil && yerr == nil:
			if xn != yn {
				if xn < yn {
					return -1
				}
				return 1
			}
		case xerr == nil:
			return -1
		case yerr == nil:
			return 1
		case x != y:
			if x < y {
				return -1
			}
			return 1
		}
	}
	switch {
	case len(a.pre) < len(b.pre):
		return -1
	case len(a.pre) > len(b.pre):
		return 1
	}
	return 0
}

// CompareVersions compares two version strings as semantic versions: -1,
// 0 or 1, and false when either is not one ("dev").
func CompareVersions(a, b string) (int, bool) {
	va, ok := parseSemver(a)
	if !ok {
		return 0, false
	}
	vb, ok := parseSemver(b)
	if !ok {
		return 0, false
	}
	return va.compare(vb), true
}

// CheckVersion refuses, with ErrDowngrade, a candidate version to that is
// older than running, or that is not a semantic version while running is
// one (it cannot be shown not to be older), unless rollback says the
// operator asked for an older version. A running version that is not a
// semantic version (a development build, "dev") takes any candidate.
func CheckVersion(running, to string, rollback bool) error {
	if rollback {
		return nil
	}
	if _, ok := parseSemver(running); !ok {
		return nil
	}
	c, ok := CompareVersions(to, running)
	if !ok {
		return fmt.Errorf("%w: %q is not a version this build can compare with the running %s; a rollback must say so (--rollback, or \"rollback\": true in the signed command)", ErrDowngrade, to, running)
	}
	if c < 0 {
		return fmt.Errorf("%w: %s is older than the running %s; a rollback must say so (--rollback, or \"rollback\": true in the signed command)", ErrDowngrade, to, running)
	}
	return nil
}
