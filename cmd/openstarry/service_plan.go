package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// installPlan is what `openstarry service install` writes and creates:
// printed by --dry-run, and undone when the install fails.
type installPlan struct {
	Manager string   // the service manager: systemd, SysV init, the Windows service control manager
	Note    string   // why this one, when it may surprise (systemd installed but not running)
	Files   []string // the files the install writes
	Unit    string   // the systemd unit as written, "" on other managers
	Command string   // what the service runs
	Data    string   // the data directory it creates (owned by User)
	User    string   // "" for root / LocalSystem
}

func (p installPlan) print(w io.Writer) {
	fmt.Fprintf(w, "service manager: %s\n", p.Manager)
	if p.Note != "" {
		fmt.Fprintf(w, "note: %s\n", p.Note)
	}
	fmt.Fprintf(w, "runs: %s\n", p.Command)
	user := p.User
	if user == "" {
		user = "root (LocalSystem on Windows)"
	}
	fmt.Fprintf(w, "as user: %s\n", user)
	fmt.Fprintf(w, "data directory: %s (created if missing, owned by that user)\n", p.Data)
	for _, f := range p.Files {
		fmt.Fprintf(w, "writes: %s\n", f)
	}
	if p.Unit != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(p.Unit, "\n"))
	}
}

// serviceCommand is the command line the service runs, for people.
func serviceCommand(args []string) string {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	parts := []string{exe}
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'\\") {
			a = fmt.Sprintf("%q", a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// undo records what did not exist before an install, so that a failed
// install can remove what it made and nothing else.
type undo struct {
	files []string // files the install may write that were not there
	dir   string   // the topmost directory of the data directory that was not there, or ""
}

func newUndo(p installPlan) *undo {
	u := &undo{}
	for _, f := range p.Files {
		if _, err := os.Lstat(f); errors.Is(err, os.ErrNotExist) {
			u.files = append(u.files, f)
		}
	}
	u.dir = firstMissing(p.Data)
	return u
}

// run removes what the failed install made.
func (u *undo) run() error {
	var errs []error
	for _, f := range u.files {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := removeServiceLinksIfNew(u.files); err != nil {
		errs = append(errs, err)
	}
	if u.dir != "" {
		if err := os.RemoveAll(u.dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// firstMissing returns the topmost ancestor of dir (dir included) that does
// not exist, or "" when dir exists.
func firstMissing(dir string) string {
	missing := ""
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			return missing
		} else if !errors.Is(err, os.ErrNotExist) {
			return missing
		}
		missing = d
		if filepath.Dir(d) == d {
			return missing
		}
	}
}
