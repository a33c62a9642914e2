package session

import (
	"crypto/rand"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"time"
)

// ErrBadID is wrapped by every id validation error.
var ErrBadID = errors.New("invalid id")

var (
	projectIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^proj_[0-9]{8}_[a-z0-9]{6}$`) })
	sessionIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sess_[0-9]{14}_[a-z0-9]{6}$`) })
	taskIDRe    = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^task_p([0-9]{1,3})_([a-z][a-z0-9]{0,31})_([0-9]{3})$`)
	})
	taskTypeRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z][a-z0-9]{0,31}$`) })
)

const idAlphabet = "abcdefghijklmnopqrstuvwxyz0123456789"

// random6 returns six characters of [a-z0-9] from crypto/rand, without
// modulo bias (rand.Text's method: reject bytes past the largest multiple).
func random6() string {
	out := make([]byte, 0, 6)
	buf := make([]byte, 16)
	for len(out) < 6 {
		if _, err := rand.Read(buf); err != nil {
			panic("session: crypto/rand failed: " + err.Error()) // never returns an error on supported systems
		}
		for _, b := range buf {
			if b < 252 && len(out) < 6 { // 252 = 7*36
				out = append(out, idAlphabet[int(b)%36])
			}
		}
	}
	return string(out)
}

// NewProjectID returns proj_{YYYYMMDD}_{6 random}, the date in UTC.
func NewProjectID(now time.Time) string {
	return "proj_" + now.UTC().Format("20060102") + "_" + random6()
}

// NewSessionID returns sess_{YYYYMMDDhhmmss}_{6 random}, the time in UTC.
func NewSessionID(now time.Time) string {
	return "sess_" + now.UTC().Format("20060102150405") + "_" + random6()
}

// PlanTaskID returns task_p{phase}_{type}_{seq:03}.
func PlanTaskID(phase int, typ string, seq int) (string, error) {
	if phase < 0 || phase > 999 {
		return "", fmt.Errorf("%w: phase %d: want 0 to 999", ErrBadID, phase)
	}
	if !taskTypeRe().MatchString(typ) {
		return "", fmt.Errorf("%w: task type %q: want a lower-case letter then up to 31 lower-case letters or digits", ErrBadID, typ)
	}
	if seq < 1 || seq > 999 {
		return "", fmt.Errorf("%w: sequence %d: want 1 to 999", ErrBadID, seq)
	}
	return fmt.Sprintf("task_p%d_%s_%03d", phase, typ, seq), nil
}

// ValidateProjectID checks proj_{YYYYMMDD}_{6 of [a-z0-9]}.
func ValidateProjectID(id string) error {
	if !projectIDRe().MatchString(id) || !validDate(id[5:13], "20060102") {
		return fmt.Errorf("%w: project id %q: want proj_YYYYMMDD_xxxxxx", ErrBadID, ClipID(id))
	}
	return nil
}

// ValidateSessionID checks sess_{YYYYMMDDhhmmss}_{6 of [a-z0-9]}.
func ValidateSessionID(id string) error {
	if !sessionIDRe().MatchString(id) || !validDate(id[5:19], "20060102150405") {
		return fmt.Errorf("%w: session id %q: want sess_YYYYMMDDhhmmss_xxxxxx", ErrBadID, ClipID(id))
	}
	return nil
}

// ValidatePlanTaskID checks task_p{phase}_{type}_{seq:03}.
func ValidatePlanTaskID(id string) error {
	m := taskIDRe().FindStringSubmatch(id)
	if m == nil || m[3] == "000" {
		return fmt.Errorf("%w: task id %q: want task_p{phase}_{type}_{001-999}", ErrBadID, ClipID(id))
	}
	return nil
}

func validDate(s, layout string) bool {
	_, err := time.Parse(layout, s)
	return err == nil
}

// ClipID returns id cut to a length fit for an error message.
func ClipID(id string) string {
	if len(id) > 64 {
		return id[:64] + "…"
	}
	return id
}

var approachIDRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^approach_[a-z0-9_]{1,64}$`) })

func validApproachID(id string) error {
	if !approachIDRe().MatchString(id) {
		return fmt.Errorf("%w: approach id %q: want approach_ then up to 64 of [a-z0-9_]", ErrBadID, ClipID(id))
	}
	return nil
}
