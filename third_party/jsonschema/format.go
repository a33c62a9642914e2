package jsonschema

import (
	"fmt"
	"net/netip"
	gourl "net/url"
	"strings"
)

// Format defined specific format.
type Format struct {
	// Name of format.
	Name string

	// Validate checks if given value is of this format.
	Validate func(v any) error
}

// formats are the formats built into this copy: those the draft/2020-12
// meta-schema asserts when a schema is checked against it ("regex" is the
// compiler's RegexpEngine). Upstream also carries the formats in
// leftOutFormats; see OPENSTARRY.md.
var formats = map[string]*Format{
	"uri":           {"uri", validateURI},
	"iri":           {"iri", validateURI},
	"uri-reference": {"uri-reference", validateURIReference},
	"iri-reference": {"iri-reference", validateURIReference},
}

// leftOutFormats are the formats upstream asserts and this copy does not
// carry. A schema compiled with format assertions on that uses one of them
// is refused (UnsupportedFormatError) rather than passed unchecked; a
// program that needs one registers it (Compiler.RegisterFormat).
var leftOutFormats = []string{"json-pointer", "relative-json-pointer", "uuid", "duration", "period", "ipv4", "ipv6",
	"hostname", "email", "date", "time", "date-time", "uri-template", "semver"}

// UnsupportedFormatError is returned by Compile for a format of
// leftOutFormats asserted and not registered.
type UnsupportedFormatError struct {
	URL    string
	Format string
}

func (e *UnsupportedFormatError) Error() string {
	return fmt.Sprintf("format %q at %q is not built into this copy of the library; register it with Compiler.RegisterFormat", e.Format, e.URL)
}

func validateIPV6(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	if !strings.Contains(s, ":") {
		return LocalizableError("missing colon")
	}
	addr, err := netip.ParseAddr(s)
	if err != nil {
		return err
	}
	if addr.Zone() != "" {
		return LocalizableError("zone id is not a part of ipv6 address")
	}
	return nil
}
func parseURL(s string) (*gourl.URL, error) {
	u, err := gourl.Parse(s)
	if err != nil {
		return nil, err
	}

	// gourl does not validate ipv6 host address
	hostName := u.Hostname()
	if strings.Contains(hostName, ":") {
		if !strings.Contains(u.Host, "[") || !strings.Contains(u.Host, "]") {
			return nil, LocalizableError("ipv6 address not enclosed in brackets")
		}
		if err := validateIPV6(hostName); err != nil {
			return nil, LocalizableError("invalid ipv6 address: %v", err)
		}
	}

	return u, nil
}
func validateURI(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	u, err := parseURL(s)
	if err != nil {
		return err
	}
	if !u.IsAbs() {
		return LocalizableError("relative url")
	}
	return nil
}
func validateURIReference(v any) error {
	s, ok := v.(string)
	if !ok {
		return nil
	}
	if strings.Contains(s, `\`) {
		return LocalizableError(`contains \`)
	}
	_, err := parseURL(s)
	return err
}
