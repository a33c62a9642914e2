package storagetest

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A Damage is a way a file is damaged while its store is closed.
type Damage int

const (
	BitFlip    Damage = iota // one bit flipped
	BitFlips                 // one to four bits flipped
	Truncation               // the file cut short
	ZeroedPage               // a 4 KiB page of it zeroed
	Bytes16                  // 16 bytes in a row overwritten with random ones
)

func (d Damage) String() string {
	return [...]string{"bit flip", "bit flips", "truncation", "zeroed page", "16 bytes"}[d]
}

// DamageBytes damages b, a file whose first used bytes are in use (used
// > 0), the way d says, at places drawn from rng. It returns the damaged
// bytes (b itself, or shorter) and says what it did.
func DamageBytes(b []byte, used int64, d Damage, rng *rand.Rand) ([]byte, string) {
	b, what, _ := DamageRange(b, used, d, rng)
	return b, what
}

// DamageRange is DamageBytes that also returns the bytes it changed, as
// the offsets [from, to) (a cut: from the cut to the old end; bit flips:
// from the first to after the last).
func DamageRange(b []byte, used int64, d Damage, rng *rand.Rand) ([]byte, string, [2]int64) {
	used = min(used, int64(len(b)))
	switch d {
	case BitFlip, BitFlips:
		n := 1
		if d == BitFlips {
			n += rng.IntN(4)
		}
		var at []string
		r := [2]int64{used, 0}
		for range n {
			off := rng.Int64N(used)
			b[off] ^= 1 << rng.IntN(8)
			at = append(at, strconv.FormatInt(off, 10))
			r = [2]int64{min(r[0], off), max(r[1], off+1)}
		}
		return b, "bits flipped at " + strings.Join(at, ","), r
	case Truncation:
		n := rng.Int64N(used)
		return b[:n], fmt.Sprintf("cut to %d of %d bytes", n, len(b)), [2]int64{n, int64(len(b))}
	case Bytes16:
		off := rng.Int64N(max(used-16, 1))
		end := min(off+16, int64(len(b)))
		for {
			old := string(b[off:end])
			for i := off; i < end; i++ {
				b[i] = byte(rng.IntN(256))
			}
			if string(b[off:end]) != old {
				break
			}
		}
		return b, fmt.Sprintf("16 bytes at %d overwritten", off), [2]int64{off, end}
	default:
		const page = 4096
		p := rng.Int64N(max((used+page-1)/page, 1))
		end := min((p+1)*page, int64(len(b)))
		clear(b[p*page : end])
		return b, fmt.Sprintf("page %d zeroed", p), [2]int64{p * page, end}
	}
}

// DamageFile damages the file at path with DamageBytes and says how.
func DamageFile(t testing.TB, path string, used int64, d Damage, rng *rand.Rand) string {
	t.Helper()
	what, _ := DamageFileRange(t, path, used, d, rng)
	return what
}

// DamageFileRange damages the file at path with DamageRange, says how and
// returns the bytes it changed.
func DamageFileRange(t testing.TB, path string, used int64, d Damage, rng *rand.Rand) (string, [2]int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, what, r := DamageRange(b, used, d, rng)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return what, r
}

// CopyDir copies the files of src, recursively, into dst (directories
// 0700, files 0600).
func CopyDir(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(out, 0o700)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(out, data, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
}
