package design

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrDigest is returned by LoadFrozen when a blueprint's bytes are not the
// ones the daemon froze.
var ErrDigest = errors.New("blueprint digest mismatch")

// LoadFrozen reads the blueprint the daemon froze for an agent process
// (DATA/run/blueprints/{agent}/{name}.json) and checks that its bytes have
// digest (Digest's "sha256:HEX"). The daemon validated those bytes before
// it froze them, so LoadFrozen compiles no schema: it only decodes them
// strictly. Source is where the daemon resolved the template (remote, cache,
// local, embedded), which the agent reports as its template_source; ""
// means "local", as for any template file.
func LoadFrozen(path, digest, source string) (*Resolved, error) {
	raw, err := readFileLimit(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("design: blueprint %s: %w", path, ErrNotFound)
		}
		return nil, fmt.Errorf("design: blueprint %s: %w", path, err)
	}
	if got := Digest(raw); got != digest {
		return nil, fmt.Errorf("design: blueprint %s has digest %s, the daemon froze %s: %w", path, got, digest, ErrDigest)
	}
	t, err := Decode(raw)
	if err != nil {
		return nil, fmt.Errorf("design: blueprint %s: %w", path, err)
	}
	if base := filepath.Base(path); base != t.Name+".json" {
		return nil, fmt.Errorf("design: blueprint %s: name %q does not match the file name: %w", path, t.Name, ErrInvalidTemplate)
	}
	abs, _ := filepath.Abs(path)
	if source == "" {
		source = SourceLocal
	}
	return &Resolved{Template: t, Raw: raw, Digest: digest, Source: source, Version: t.Version, Location: abs}, nil
}
