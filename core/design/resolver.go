package design

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/configs"
)

// Where a resolved template came from.
const (
	SourceRemote   = "remote"   // the design layer served it, or confirmed the cached copy (304)
	SourceCache    = "cache"    // degraded boot: the design layer could not be used
	SourceLocal    = "local"    // a template directory or a file named on the command line
	SourceEmbedded = "embedded" // the templates built into the binary
)

// Resolved is a template ready to boot, with what an agent records about it.
type Resolved struct {
	Template  *Template
	Raw       []byte    // the exact bytes validated, digested and (maybe) signed
	Digest    string    // Digest(Raw), "sha256:HEX"
	Source    string    // SourceRemote, SourceCache, SourceLocal or SourceEmbedded
	Version   string    // Template.Version
	FetchedAt time.Time // remote and cache: when the design layer last served or confirmed these bytes; zero otherwise
	Signature string    // the detached signature that came with it, "" when none
	Location  string    // URL, cache file, template file or "embedded:NAME"
	// Degraded says why the design layer's copy was not used, when the
	// template came from the cache instead (a degraded boot); "" otherwise.
	Degraded string
}

// Vars returns what the kernel stores in the agent's working variables:
// template_name, template_version, template_digest and template_source.
func (r *Resolved) Vars() map[string]any {
	return map[string]any{
		"template_name":    r.Template.Name,
		"template_version": r.Version,
		"template_digest":  r.Digest,
		"template_source":  r.Source,
	}
}

// Shipped returns the templates built into the binary (configs/templates),
// rooted so that master.json is at the top.
func Shipped() fs.FS {
	sub, err := fs.Sub(configs.Templates, "templates")
	if err != nil {
		// fs.Sub fails only on an invalid path; "templates" is valid.
		panic(err)
	}
	return sub
}

// ResolverOptions say where templates come from.
type ResolverOptions struct {
	// Fetcher is the remote design layer (design.url); nil when none is
	// configured. With a Fetcher, a template name is resolved by the design
	// layer and its cache only: neither Dir nor Embedded is consulted, so a
	// device never silently boots a blueprint its design layer did not
	// serve.
	Fetcher *Fetcher
	// Dir is the local template directory (DATA/templates or --templates);
	// "" or a missing directory is skipped.
	Dir string
	// Embedded is the last resort without a Fetcher, normally Shipped();
	// nil for none.
	Embedded fs.FS
	// Validator checks local and embedded templates (the Fetcher has its
	// own).
	Validator Validator
}

// Resolver finds a template by name or file. It is safe for concurrent use.
type Resolver struct {
	o ResolverOptions
}

// NewResolver returns a Resolver for o.
func NewResolver(o ResolverOptions) *Resolver { return &Resolver{o: o} }

// IsFile reports whether Resolve reads nameOrFile as a file path rather
// than a template name: it ends in .json or contains a path separator.
func IsFile(nameOrFile string) bool {
	return strings.HasSuffix(nameOrFile, ".json") || strings.ContainsAny(nameOrFile, `/\`)
}

// Resolve returns the template nameOrFile names.
//
// A file path (see IsFile) is read and validated on its own, and its file
// name must be {name}.json; Source is "local". A template name goes to the
// Fetcher when there is one (see Fetcher.Get); otherwise to Dir, then to
// Embedded, a file in Dir shadowing the embedded template of the same name
// even when it is invalid. Local and embedded templates are validated as a
// set, so a master whose workers are missing is refused; errors of other
// files in the set do not matter.
func (r *Resolver) Resolve(ctx context.Context, nameOrFile string) (*Resolved, error) {
	if IsFile(nameOrFile) {
		return r.resolveFile(nameOrFile)
	}
	if !ValidName(nameOrFile) {
		return nil, fmt.Errorf("design: %q is neither a template name (%s) nor a .json file: %w", nameOrFile, namePattern(), ErrInvalidTemplate)
	}
	if r.o.Fetcher != nil {
		return r.o.Fetcher.Get(ctx, nameOrFile)
	}
	return r.resolveLocal(nameOrFile)
}

// Preflight validates every local and embedded template as one set, the
// design-layer phase of a boot without a remote design layer. With a
// Fetcher there is nothing local to check and it returns nil. The error is
// a ValidationErrors listing every error, or an I/O error.
func (r *Resolver) Preflight(ctx context.Context) error {
	if r.o.Fetcher != nil {
		return ctx.Err()
	}
	ov, err := r.overlay()
	if err != nil {
		return err
	}
	_, err = r.o.Validator.load(ov, ov.label)
	return err
}

func (r *Resolver) resolveFile(path string) (*Resolved, error) {
	raw, err := readFileLimit(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("design: template file %s: %w", path, ErrNotFound)
		}
		return nil, fmt.Errorf("design: template file %s: %w", path, err)
	}
	t, err := r.o.Validator.Validate(path, raw)
	if err != nil {
		return nil, err
	}
	if base := filepath.Base(path); base != t.Name+".json" {
		return nil, ValidationErrors{{File: path, Path: "/name", Rule: RuleFileName,
			Message: fmt.Sprintf("name %q does not match the file name %q (want %s.json)", t.Name, base, t.Name)}}
	}
	abs, _ := filepath.Abs(path)
	return &Resolved{Template: t, Raw: raw, Digest: Digest(raw), Source: SourceLocal, Version: t.Version, Location: abs}, nil
}

func (r *Resolver) resolveLocal(name string) (*Resolved, error) {
	ov, err := r.overlay()
	if err != nil {
		return nil, err
	}
	set, verr := r.o.Validator.load(ov, ov.label)
	if e, ok := set.Get(name); ok {
		src := SourceEmbedded
		if ov.inUpper(name + ".json") {
			src = SourceLocal
		}
		return &Resolved{Template: e.Template, Raw: e.Raw, Digest: e.Digest, Source: src, Version: e.Template.Version,
			Signature: e.Signature, Location: e.File}, nil
	}
	var ves ValidationErrors
	if errors.As(verr, &ves) {
		if mine := ves.ForFile(ov.label(name + ".json")); len(mine) > 0 {
			return nil, mine
		}
	} else if verr != nil {
		return nil, verr
	}
	var where []string
	if r.o.Dir != "" {
		where = append(where, r.o.Dir)
	}
	if r.o.Embedded != nil {
		where = append(where, "the embedded templates")
	}
	if len(where) == 0 {
		where = append(where, "no template source configured")
	}
	return nil, fmt.Errorf("design: template %s not found in %s: %w", name, strings.Join(where, " or "), ErrNotFound)
}

// overlay stacks Dir over Embedded.
func (r *Resolver) overlay() (*overlayFS, error) {
	ov := &overlayFS{lower: r.o.Embedded, dir: r.o.Dir}
	if r.o.Dir != "" {
		st, err := os.Stat(r.o.Dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("design: template directory: %w", err)
		case !st.IsDir():
			return nil, fmt.Errorf("design: template directory %s is not a directory", r.o.Dir)
		default:
			ov.upper = os.DirFS(r.o.Dir)
		}
	}
	return ov, nil
}

// overlayFS is a read-only union of two flat template directories: a name
// in upper hides the same name in lower. Either may be nil.
type overlayFS struct {
	upper, lower fs.FS
	dir          string // upper's path, for labels
}

func (o *overlayFS) Open(name string) (fs.File, error) {
	for _, f := range []fs.FS{o.upper, o.lower} {
		if f == nil {
			continue
		}
		file, err := f.Open(name)
		if err == nil || !errors.Is(err, fs.ErrNotExist) {
			return file, err
		}
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (o *overlayFS) ReadDir(name string) ([]fs.DirEntry, error) {
	seen := map[string]bool{}
	var out []fs.DirEntry
	for _, f := range []fs.FS{o.upper, o.lower} {
		if f == nil {
			continue
		}
		des, err := fs.ReadDir(f, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			if !seen[de.Name()] {
				seen[de.Name()] = true
				out = append(out, de)
			}
		}
	}
	slices.SortFunc(out, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	return out, nil
}

func (o *overlayFS) inUpper(base string) bool {
	if o.upper == nil {
		return false
	}
	_, err := fs.Stat(o.upper, base)
	return err == nil
}

// label names a file of the overlay in errors.
func (o *overlayFS) label(base string) string {
	if o.inUpper(base) {
		return filepath.Join(o.dir, base)
	}
	return "embedded:" + base
}
