package agent

import (
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxIDLen is the longest agent or task id accepted, in bytes.
const MaxIDLen = 128

// ErrInvalidID is returned for an agent or task id that could name a path
// outside the data directory, or that is empty, too long or unprintable.
var ErrInvalidID = errors.New("invalid id")

// ValidateID accepts ids made of ASCII letters, digits, '-', '_', '.' and
// ':', 1 to MaxIDLen bytes long, not starting with '.'. Every store builds
// file names and keys from agent ids, so "../x", "/etc/passwd" or a NUL byte
// must never get past here.
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", ErrInvalidID)
	case len(id) > MaxIDLen:
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrInvalidID, len(id), MaxIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: not UTF-8", ErrInvalidID)
	case id[0] == '.':
		return fmt.Errorf("%w: %q starts with a dot", ErrInvalidID, id)
	}
	for i, c := range id { // runes, so that a message shows 'é', not the bytes of it
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '-' || c == '_' || c == '.' || c == ':'
		if !ok {
			return fmt.Errorf("%w: %q: character %q at byte %d is not allowed (letters, digits, - _ . : only)",
				ErrInvalidID, id, c, i)
		}
	}
	return nil
}
