package design

import (
	"errors"
	"fmt"
	"strings"
)

// These errors can occur when a template is decoded, validated or loaded.
var (
	// ErrInvalidTemplate is wrapped by every template decoding or
	// validation error; ValidationErrors matches it with errors.Is.
	ErrInvalidTemplate = errors.New("invalid template")
)

// These errors can occur when a template is resolved or fetched.
var (
	// ErrNotFound is returned when no source has the template: the design
	// layer answered that it does not exist (an authoritative 404), or no
	// local directory nor the embedded set holds it.
	ErrNotFound = errors.New("template not found")

	// ErrUnavailable is returned when the design layer cannot be used (it is
	// unreachable, failing, or answered with an invalid or badly signed
	// template) and there is no usable cached copy either.
	ErrUnavailable = errors.New("design layer unavailable and no usable cached template")

	// ErrBadSignature is returned when a template's signature is missing,
	// malformed, made by an untrusted key or does not match its bytes.
	ErrBadSignature = errors.New("bad template signature")

	// ErrCacheInvalid is returned when a cached template is refused: its
	// bytes no longer match the digest or signature recorded when it was
	// fetched, or it no longer validates.
	ErrCacheInvalid = errors.New("cached template refused")

	// ErrUnsignedCommands is returned for a template from the design layer
	// (or its cache) that is not signed — there are no trusted keys — and
	// names mcp_servers commands, which would run on the device.
	ErrUnsignedCommands = errors.New("unsigned template from the design layer starts commands")
)

// Rules checked in Go, beside the schema keywords (required,
// additionalProperties, type, enum, pattern, minimum, ...) that name the
// schema rule a template breaks.
const (
	RuleRead            = "read"              // the file could not be read
	RuleSize            = "size"              // larger than MaxTemplateBytes
	RuleSyntax          = "syntax"            // not JSON, or data after the JSON value
	RuleDecode          = "type"              // valid by the schema but not representable (e.g. 1.5 for an integer)
	RuleUnknownTool     = "unknown_tool"      // a tool the tool registry does not have
	RuleWorkersOnWorker = "workers_on_worker" // only a master names workers
	RuleNoMemory        = "no_memory"         // a memory_* tool without a memory engine
	RuleEphemeralMaster = "ephemeral_master"  // only a worker can be ephemeral
	RuleNoAllowlist     = "no_allowlist"      // http_get listed without an http_allowlist
	RuleMCPServer       = "mcp_server"        // an MCP server without exactly one of command and url, or a duplicate name
	RuleModelTools      = "model_tools"       // more tools, or bigger schemas, than a model is offered (MaxModelTools, …)
	RuleMissingWorker   = "missing_worker"    // a master names a worker template the set does not hold
	RuleNotAWorker      = "not_a_worker"      // a master names a template whose role is not worker
	RuleDuplicateName   = "duplicate_name"    // two files define the same name
	RuleFileName        = "file_name"         // the file is not {name}.json
	RuleNameMatch       = "name_match"        // the design layer answered another template than asked for
	RuleSignature       = "signature"         // a {file}.sig file that cannot be parsed or does not verify
)

// ValidationError is one broken rule in one template.
type ValidationError struct {
	File    string // file name or path as given, or the URL of a fetched template
	Path    string // JSON pointer (RFC 6901) to the offending value; "" is the whole document
	Rule    string // the schema keyword or Rule* constant broken
	Message string
}

// Error formats e as "FILE: /json/path: rule: message"; the whole document
// prints as "/".
func (e ValidationError) Error() string {
	p := e.Path
	if p == "" {
		p = "/"
	}
	return fmt.Sprintf("%s: %s: %s: %s", e.File, p, e.Rule, e.Message)
}

// ValidationErrors lists every rule broken by one or more templates. It is
// returned as an error only when it is not empty.
type ValidationErrors []ValidationError

// Error prints one line per error.
func (es ValidationErrors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Is reports ErrInvalidTemplate as matching, so callers can test any
// validation failure with errors.Is(err, ErrInvalidTemplate).
func (es ValidationErrors) Is(target error) bool { return target == ErrInvalidTemplate }

// ForFile returns the errors about file.
func (es ValidationErrors) ForFile(file string) ValidationErrors {
	var out ValidationErrors
	for _, e := range es {
		if e.File == file {
			out = append(out, e)
		}
	}
	return out
}

// Files returns the number of distinct files with errors.
func (es ValidationErrors) Files() int {
	seen := map[string]bool{}
	for _, e := range es {
		seen[e.File] = true
	}
	return len(seen)
}

// orNil returns es as an error, or nil when it is empty (a nil
// ValidationErrors in an error interface is not a nil error).
func (es ValidationErrors) orNil() error {
	if len(es) == 0 {
		return nil
	}
	return es
}
