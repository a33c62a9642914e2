package update

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// The platform of a candidate binary is read from the build information
// block the Go linker writes into every binary since Go 1.18, without
// running it (a binary for another architecture may run under binfmt
// emulation, and would then report a platform it does not run on
// natively).
//
// This is the one part of debug/buildinfo the update needs, read here by
// hand: debug/buildinfo links the readers of ELF, PE, Mach-O, XCOFF, DWARF
// and zstd, which measured 256 KiB of the stripped linux/arm binary
// (11.25 → 11.00 MiB for the small build, whose budget is 11 MiB). The
// block is found by its magic at a 16-byte aligned offset, as
// debug/buildinfo finds it where a binary has no section table: the
// linker aligns it so, and the file offset of a loadable segment keeps the
// alignment of its address.

const (
	buildInfoAlign      = 16
	buildInfoHeaderSize = 32  // magic (14), pointer size, flags, 16 bytes unused since Go 1.18
	buildInfoInline     = 0x2 // flags: the strings follow the header (Go ≥ 1.18)
	maxBuildInfoString  = 1 << 20
)

// errNoBuildInfo is returned for a file without a Go build information
// block of Go 1.18 or later.
var errNoBuildInfo = errors.New("no Go build information")

// buildInfoMagic returns the block's magic. It is assembled at run time so
// that this binary's read-only data holds no copy of it for the search to
// find first.
func buildInfoMagic() []byte { return append([]byte{0xff}, " Go buildinf:"...) }

// buildSettings returns the build settings (GOOS, GOARCH, GOARM, …) the
// binary at path records.
func buildSettings(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return settingsFrom(f)
}

// settingsFrom returns the build settings of the binary r holds.
func settingsFrom(r io.ReaderAt) (map[string]string, error) {
	var settings map[string]string
	err := eachMagic(r, func(off int64) bool {
		settings = readBuildInfo(r, off)
		return settings != nil
	})
	if settings == nil {
		return nil, err
	}
	return settings, nil
}

// readBuildInfo decodes the block whose header is at off, or returns nil
// when what is there is not one (a copy of the magic elsewhere, a block of
// Go before 1.18, damage).
func readBuildInfo(f io.ReaderAt, off int64) map[string]string {
	var h [buildInfoHeaderSize]byte
	if _, err := f.ReadAt(h[:], off); err != nil {
		return nil
	}
	if ptr := h[14]; (ptr != 4 && ptr != 8) || h[15]&buildInfoInline == 0 {
		return nil
	}
	br := &byteReader{r: io.NewSectionReader(f, off+buildInfoHeaderSize, 2*(maxBuildInfoString+binary.MaxVarintLen64))}
	vers, err := readBuildString(br)
	if err != nil || !strings.HasPrefix(vers, "go") && !strings.HasPrefix(vers, "devel") {
		return nil
	}
	mod, err := readBuildString(br)
	if err != nil {
		return nil
	}
	settings := parseBuildSettings(mod)
	if settings["GOOS"] == "" || settings["GOARCH"] == "" {
		return nil
	}
	return settings
}

// eachMagic calls try with the offset of each 16-byte aligned copy of the
// magic, in file order, until try returns true; it returns errNoBuildInfo
// when none was taken.
func eachMagic(r io.ReaderAt, try func(off int64) bool) error {
	magic := buildInfoMagic()
	const chunk = 64 << 10
	buf := make([]byte, chunk+len(magic)-1)
	for base := int64(0); ; base += chunk {
		n, err := r.ReadAt(buf, base)
		data := buf[:n]
		for i := 0; ; {
			j := bytes.Index(data[i:], magic)
			if j < 0 {
				break
			}
			at := i + j
			if at < chunk && (base+int64(at))%buildInfoAlign == 0 && try(base+int64(at)) {
				return nil
			}
			i = at + 1
		}
		if err != nil || n < len(buf) {
			return errNoBuildInfo
		}
	}
}

// readBuildString reads one length-prefixed (uvarint) string.
func readBuildString(br *byteReader) (string, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil || n > maxBuildInfoString {
		return "", fmt.Errorf("%w: a damaged block", errNoBuildInfo)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(br.r, b); err != nil {
		return "", fmt.Errorf("%w: a damaged block", errNoBuildInfo)
	}
	return string(b), nil
}

// parseBuildSettings returns the build lines of the module information
// ("build\tKEY=VALUE"), which the linker wraps in 16 bytes on each side.
func parseBuildSettings(mod string) map[string]string {
	if len(mod) >= 33 && mod[len(mod)-17] == '\n' {
		mod = mod[16 : len(mod)-16]
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(mod, "\n") {
		kv, ok := strings.CutPrefix(line, "build\t")
		if !ok {
			continue
		}
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}

// byteReader reads a uvarint from a SectionReader byte by byte.
type byteReader struct{ r *io.SectionReader }

func (b *byteReader) ReadByte() (byte, error) {
	var p [1]byte
	_, err := io.ReadFull(b.r, p[:])
	return p[0], err
}
