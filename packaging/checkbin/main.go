// Command checkbin checks release binaries before they ship: each must be
// static (an ELF without an interpreter or needed libraries; any binary
// built with CGO_ENABLED=0) and at least its headroom under its size
// budget, so that the next feature does not break the build. It prints one
// line per binary with its size, its budget and its headroom (the budget
// less the size). build.sh runs it; it is a build tool, not part of the
// openstarry binary.
//
//	go run ./packaging/checkbin -max 20 -headroom 1 dist/openstarry-linux-arm64 ...
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
	"strconv"
)

func main() {
	maxMiB := flag.Float64("max", 20, "size budget of each binary, MiB")
	headroomMiB := flag.Float64("headroom", 0, "how far under its budget each binary must stay, MiB")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: checkbin [-max MiB] [-headroom MiB] BINARY...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	failed := false
	for _, path := range flag.Args() {
		r, err := check(path, int64(*maxMiB*(1<<20)), int64(*headroomMiB*(1<<20)))
		if err != nil {
			fmt.Fprintf(os.Stderr, "checkbin: %s: %v\n", path, err)
			failed = true
			continue
		}
		fmt.Printf("%-44s %6.2f MiB  %s  static  (budget %s MiB)  headroom %.2f MiB\n", path, mib(r.size), r.platform, strconv.FormatFloat(*maxMiB, 'f', -1, 64), *maxMiB-mib(r.size))
	}
	if failed {
		os.Exit(1)
	}
}

type result struct {
	size     int64
	platform string
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// check reports what is wrong with one binary: not static, or less than
// headroom bytes under max.
func check(path string, max, headroom int64) (result, error) {
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
	if err := fits(r.size, max, headroom); err != nil {
		errs = append(errs, err)
	}
	return r, errors.Join(errs...)
}

// fits says whether a binary of size bytes is at least headroom bytes
// under its budget of max bytes.
func fits(size, max, headroom int64) error {
	switch {
	case size > max:
		return fmt.Errorf("%.2f MiB exceeds the budget of %.2f MiB", mib(size), mib(max))
	case max-size < headroom:
		return fmt.Errorf("%.2f MiB leaves %.2f MiB of the budget of %.2f MiB, less than the %.2f MiB of headroom a release needs: make it smaller (./build.sh sizes TARGET lists the bytes per package) or raise the budget in build.sh, saying why", mib(size), mib(max-size), mib(max), mib(headroom))
	}
	return nil
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
