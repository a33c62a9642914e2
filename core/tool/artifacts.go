package tool

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// Artifacts is an agent's artifacts directory, opened once as an os.Root.
// Every file tool reaches files only through it: a path is resolved inside
// the tree by the kernel one element at a time (openat), so neither "..",
// an absolute path, nor a symbolic link (to a directory or to a file,
// anywhere on the path) leads out of it. A symlink whose target stays
// inside the tree is followed; one that leaves it is refused.
//
// Invariant: no method of Artifacts opens a path by name outside the root;
// the directory that was opened stays the root even if it is renamed or
// replaced afterwards.
//
// An Artifacts is safe for concurrent use. The agent's runtime owns it and
// closes it when the agent stops.
type Artifacts struct {
	dir  string
	root *os.Root
}

// OpenArtifacts creates dir (0700, see privfs) if needed and opens it as
// the root of every file tool's paths.
func OpenArtifacts(dir string) (*Artifacts, error) {
	if err := privfs.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("artifacts directory: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("artifacts directory: %w", err)
	}
	return &Artifacts{dir: dir, root: root}, nil
}

// Dir returns the directory the root was opened on.
func (a *Artifacts) Dir() string { return a.dir }

// Close releases the root.
func (a *Artifacts) Close() error { return a.root.Close() }

// ErrOutside is wrapped by every refusal of a path that is absolute,
// empty, or leads out of the artifacts directory.
var ErrOutside = errors.New("path leaves the artifacts directory")

// clean checks rel lexically (clear messages for the common mistakes)
// and returns it cleaned; os.Root enforces the confinement itself.
func clean(rel string) (string, error) {
	if rel == "" {
		return "", fmt.Errorf("empty path: %w", ErrOutside)
	}
	if filepath.IsAbs(rel) || strings.HasPrefix(rel, "/") || strings.HasPrefix(rel, `\`) || filepath.VolumeName(rel) != "" {
		return "", fmt.Errorf("path %q must be relative to the artifacts directory: %w", rel, ErrOutside)
	}
	if strings.ContainsRune(rel, 0) {
		return "", fmt.Errorf("path %q holds a NUL byte: %w", rel, ErrOutside)
	}
	c := filepath.Clean(rel)
	if c == ".." || strings.HasPrefix(c, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q: %w", rel, ErrOutside)
	}
	return c, nil
}

// explain turns os.Root's refusal of an escaping path (a symlink out of
// the tree) into ErrOutside, keeping the cause.
func explain(rel string, err error) error {
	if err == nil {
		return nil
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && strings.Contains(pe.Err.Error(), "escapes") {
		return fmt.Errorf("path %q: %w (%v)", rel, ErrOutside, pe.Err)
	}
	return fmt.Errorf("artifacts: %w", err)
}

// OpenFile opens rel inside the tree with flag and perm (see
// os.OpenFile). With os.O_CREATE the missing parent directories are made
// first (0700). A file it creates has at most perm, whatever the umask.
func (a *Artifacts) OpenFile(rel string, flag int, perm os.FileMode) (*os.File, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, err
	}
	if c == "." {
		return nil, fmt.Errorf("path %q names the artifacts directory itself, not a file: %w", rel, ErrOutside)
	}
	if flag&os.O_CREATE != 0 {
		if dir := filepath.Dir(c); dir != "." {
			if err := a.root.MkdirAll(dir, privfs.DirMode); err != nil {
				return nil, explain(rel, err)
			}
		}
	}
	f, err := a.root.OpenFile(c, flag, perm)
	return f, explain(rel, err)
}

// Open opens rel inside the tree for reading.
func (a *Artifacts) Open(rel string) (*os.File, error) { return a.OpenFile(rel, os.O_RDONLY, 0) }

// Stat describes rel inside the tree, following a final symlink that
// stays inside it.
func (a *Artifacts) Stat(rel string) (fs.FileInfo, error) {
	c, err := clean(rel)
	if err != nil {
		return nil, err
	}
	fi, err := a.root.Stat(c)
	return fi, explain(rel, err)
}

// MkdirAll makes rel and its missing parents inside the tree (0700).
func (a *Artifacts) MkdirAll(rel string) error {
	c, err := clean(rel)
	if err != nil {
		return err
	}
	return explain(rel, a.root.MkdirAll(c, privfs.DirMode))
}
