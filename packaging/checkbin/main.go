// Command checkbin checks release binaries before they ship: each must be
// static (an ELF without an interpreter or needed libraries; any binary
// built with CGO_ENABLED=0) and no larger than its size budget. It prints
// one line per binary with its size. build.sh runs it; it is a build tool,
// not part of the openstarry binary.
//
//	go run ./packaging/checkbin -max 20 dist/openstarry-linux-arm64 ...
package main

import (
	"debug/buildinfo"
	"debug/elf"
	"debug/pe"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	maxMiB := flag.Float64("max", 20, "size budget of each binary, MiB")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: checkbin [-max MiB] BINARY...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		r, err := check(path, int64(*maxMiB*(1<<20)))
		if err != nil {
			fmt.Fprintf(os.Stderr, "checkbin: %s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%-44s %6.2f MiB  %s  static  (budget %.0f MiB)\n", path, float64(r.size)/(1<<20), r.platform, *maxMiB)
	}
	if failed {
		os.Exit(1)
	}
}

type result struct {
	size     int64
	platform string
}

// check reports what is wrong with one binary.
func check(path string, max int64) (result, error) {
	var r result
	f, err := os.Open(path)
	if err != nil {
		return r, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return r, err
	}
	r.size = st.Size()
	bi, err := buildinfo.Read(f)
	if err != nil {
		return r, fmt.Errorf("not a Go binary: %w", err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	r.platform = settings["GOOS"] + "/" + settings["GOARCH"]
	if v := settings["GOARM"]; v != "" {
		r.platform += "v" + v
	}
	var errs []error
	if settings["CGO_ENABLED"] != "0" {
		errs = append(errs, fmt.Errorf("built with CGO_ENABLED=%q, want 0", settings["CGO_ENABLED"]))
	}
	if err := staticImage(f); err != nil {
		errs = append(errs, err)
	}
	if r.size > max {
		errs = append(errs, fmt.Errorf("%.2f MiB exceeds the budget of %.2f MiB", float64(r.size)/(1<<20), float64(max)/(1<<20)))
	}
	return r, errors.Join(errs...)
}

// staticImage checks an ELF for an interpreter or needed shared libraries.
// A PE built without cgo imports only system DLLs through the Go runtime's
// own loader, which is what static means there: it is accepted when it
// parses.
func staticImage(f io.ReaderAt) error {
	if e, err := elf.NewFile(f); err == nil {
		defer e.Close()
		for _, p := range e.Progs {
			if p.Type == elf.PT_INTERP {
				return errors.New("dynamically linked: the ELF has an interpreter (PT_INTERP)")
			}
		}
		libs, err := e.ImportedLibraries()
		if err == nil && len(libs) > 0 {
			return fmt.Errorf("dynamically linked: needs %v", libs)
		}
		return nil
	}
	if p, err := pe.NewFile(f); err == nil {
		defer p.Close()
		return nil
	}
	return errors.New("neither ELF nor PE")
}
