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
)

func (d Damage) String() string {
	return [...]string{"bit flip", "bit flips", "truncation", "zeroed page"}[d]
}

// DamageBytes damages b, a file whose first used bytes are in use (used
// > 0), the way d says, at places drawn from rng. It returns the damaged
// bytes (b itself, or shorter) and says what it did.
func DamageBytes(b []byte, used int64, d Damage, rng *rand.Rand) ([]byte, string) {
	used = min(used, int64(len(b)))
	switch d {
	case BitFlip, BitFlips:
		n := 1
		if d == BitFlips {
			n += rng.IntN(4)
		}
		var at []string
		for range n {
			off := rng.Int64N(used)
			b[off] ^= 1 << rng.IntN(8)
			at = append(at, strconv.FormatInt(off, 10))
		}
		return b, "bits flipped at " + strings.Join(at, ",")
	case Truncation:
		n := rng.Int64N(used)
		return b[:n], fmt.Sprintf("cut to %d of %d bytes", n, len(b))
	default:
		const page = 4096
		p := rng.Int64N(max((used+page-1)/page, 1))
		clear(b[p*page : min((p+1)*page, int64(len(b)))])
		return b, fmt.Sprintf("page %d zeroed", p)
	}
}

// DamageFile damages the file at path with DamageBytes and says how.
func DamageFile(t testing.TB, path string, used int64, d Damage, rng *rand.Rand) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b, what := DamageBytes(b, used, d, rng)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return what
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
