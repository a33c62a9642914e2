package design

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Entry is one valid template of a Set, with the exact bytes it was read
// from (digests and signatures are over these bytes, never over a
// re-encoding).
type Entry struct {
	File      string // file as named in errors: a path for LoadDir, prefix/name for Load
	Raw       []byte
	Template  *Template
	Digest    string // Digest(Raw)
	Signature string // content of {file}.sig ("ed25519:<base64>"), "" when there is none
}

// Set is a validated collection of templates: the content of a template
// directory or of the embedded templates. It holds only templates with no
// error at all, including the set rules (unique names, workers exist). A Set
// is immutable and safe for concurrent use.
type Set struct {
	byName map[string]*Entry
	names  []string // sorted
}

// Get returns the template called name.
func (s *Set) Get(name string) (*Entry, bool) {
	if s == nil {
		return nil, false
	}
	e, ok := s.byName[name]
	return e, ok
}

// Names returns the template names, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	return append([]string(nil), s.names...)
}

// Len returns the number of templates.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.names)
}

// LoadDir loads and validates every *.json file directly in dir (not in
// subdirectories; names starting with "." are skipped). Files are named in
// errors as filepath.Join(dir, base).
//
// The Set holds the templates that have no error; the error is a
// ValidationErrors listing every error of every file, or an I/O error when
// dir cannot be listed.
func (v Validator) LoadDir(dir string) (*Set, error) {
	return v.load(os.DirFS(dir), func(base string) string { return filepath.Join(dir, base) })
}

// Load is LoadDir for any fs.FS (an embed.FS, fstest.MapFS, os.DirFS): it
// reads the *.json files at the root of fsys. prefix is joined to the file
// names in errors; it may be empty.
func (v Validator) Load(fsys fs.FS, prefix string) (*Set, error) {
	return v.load(fsys, func(base string) string {
		if prefix == "" {
			return base
		}
		return path.Join(prefix, base)
	})
}

// candidate is one file on its way into a Set.
type candidate struct {
	base string    // file name inside the FS
	file string    // file as named in errors
	raw  []byte    // the bytes read
	t    *Template // decoded when the single-template rules passed
	sig  string    // content of the .sig file
	errs ValidationErrors
	// loose is what could be read of an invalid template (role and
	// workers), so that the set rules report on it too: every error of a
	// file is listed at once, not one rule at a time.
	loose looseTemplate
}

// looseTemplate is the part of a template the set rules need, read without
// validation (fields of the wrong type stay empty).
type looseTemplate struct {
	Role    string   `json:"role"`
	Workers []string `json:"workers"`
}

// role and workers are the candidate's, valid or not.
func (c *candidate) role() string {
	if c.t != nil {
		return c.t.Role
	}
	return c.loose.Role
}

func (c *candidate) workers() []string {
	if c.t != nil {
		return c.t.Workers
	}
	return c.loose.Workers
}

func (v Validator) load(fsys fs.FS, label func(string) string) (*Set, error) {
	dirents, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return &Set{byName: map[string]*Entry{}}, fmt.Errorf("design: list templates: %w", err)
	}
	var cands []*candidate
	for _, de := range dirents {
		base := de.Name()
		if de.IsDir() || strings.HasPrefix(base, ".") || !strings.HasSuffix(base, ".json") {
			continue
		}
		cands = append(cands, v.loadOne(fsys, base, label(base)))
	}

	// Set rules, over every template that decoded and passed the
	// single-template rules. A name belongs to the file called {name}.json,
	// else to the first file (in name order) that defines it; every other
	// file defining it is a duplicate.
	byName := map[string]*candidate{}
	for _, c := range cands {
		if c.t != nil && c.base == c.t.Name+".json" {
			byName[c.t.Name] = c
		}
	}
	for _, c := range cands {
		if c.t == nil {
			continue
		}
		if owner, dup := byName[c.t.Name]; dup && owner != c {
			c.errs = append(c.errs, ValidationError{File: c.file, Path: "/name", Rule: RuleDuplicateName,
				Message: fmt.Sprintf("name %q is also defined in %s", c.t.Name, owner.file)})
			continue
		}
		byName[c.t.Name] = c
	}
	byFile := map[string]*candidate{}
	for _, c := range cands {
		byFile[c.base] = c
	}
	for _, c := range cands {
		if c.role() != RoleMaster {
			continue
		}
		for i, w := range c.workers() {
			if !ValidName(w) {
				continue // the schema reported it
			}
			at := fmt.Sprintf("/workers/%d", i)
			wc, ok := byName[w]
			if !ok {
				wc = byFile[w+".json"]
			}
			switch {
			case wc == nil:
				c.errs = append(c.errs, ValidationError{File: c.file, Path: at, Rule: RuleMissingWorker,
					Message: fmt.Sprintf("worker template %q is not in the set", w)})
			case len(wc.errs) > 0:
				c.errs = append(c.errs, ValidationError{File: c.file, Path: at, Rule: RuleMissingWorker,
					Message: fmt.Sprintf("worker template %q is invalid (see %s)", w, wc.file)})
			case wc.t.Role != RoleWorker:
				c.errs = append(c.errs, ValidationError{File: c.file, Path: at, Rule: RuleNotAWorker,
					Message: fmt.Sprintf("template %q has role %q, want %q", w, wc.t.Role, RoleWorker)})
			}
		}
	}

	s := &Set{byName: map[string]*Entry{}}
	var all ValidationErrors
	for _, c := range cands {
		if len(c.errs) > 0 {
			all = append(all, c.errs...)
			continue
		}
		s.byName[c.t.Name] = &Entry{File: c.file, Raw: c.raw, Template: c.t, Digest: Digest(c.raw), Signature: c.sig}
		s.names = append(s.names, c.t.Name)
	}
	sort.Strings(s.names)
	sortErrors(all)
	return s, all.orNil()
}

// loadOne reads and checks one file, its file name and its signature file.
func (v Validator) loadOne(fsys fs.FS, base, file string) *candidate {
	c := &candidate{base: base, file: file}
	data, err := readLimited(fsys, base)
	if err != nil {
		c.errs = ValidationErrors{{File: file, Rule: RuleRead, Message: err.Error()}}
		return c
	}
	c.raw = data
	t, errs := v.check(file, data)
	c.t = t
	if t == nil {
		_ = json.Unmarshal(data, &c.loose) // best effort: what it cannot read stays empty
	}
	if name := docName(data); ValidName(name) && name+".json" != base {
		errs = append(errs, ValidationError{File: file, Path: "/name", Rule: RuleFileName,
			Message: fmt.Sprintf("name %q does not match the file name %q (want %s.json)", name, base, name)})
	}
	sig, serr := readSignatureFile(fsys, base+".sig")
	if serr != nil {
		errs = append(errs, ValidationError{File: file, Rule: RuleSignature, Message: serr.Error()})
	}
	c.sig = sig
	c.errs = errs
	return c
}

// docName returns the template's name when data is an object with a string
// name, even if the template is otherwise invalid; "" when not.
func docName(data []byte) string {
	var d map[string]any
	if json.Unmarshal(data, &d) != nil {
		return ""
	}
	n, _ := d["name"].(string)
	return n
}

// readLimited reads a file of at most MaxTemplateBytes.
func readLimited(fsys fs.FS, name string) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Size() > MaxTemplateBytes {
		return nil, fmt.Errorf("%d bytes, larger than the %d byte limit", st.Size(), MaxTemplateBytes)
	}
	data, err := readAllLimit(f, MaxTemplateBytes)
	if err != nil {
		return nil, err
	}
	return data, nil
}

// readSignatureFile returns the trimmed content of a .sig file, "" when
// there is none, or an error when it is not a well-formed signature.
func readSignatureFile(fsys fs.FS, name string) (string, error) {
	data, err := fs.ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %v", name, err)
	}
	sig := strings.TrimSpace(string(data))
	if _, _, err := ParseSignature(sig); err != nil {
		return "", fmt.Errorf("%s: %v", name, err)
	}
	return sig, nil
}
