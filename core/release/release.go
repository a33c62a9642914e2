package release

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/design"
)

// The names of the checksum list and of its signature in a release
// directory.
const (
	SumsFile = "SHA256SUMS"
	SigFile  = "SHA256SUMS.sig"
)

// maxSums bounds the checksum list read: a release has tens of files.
const maxSums = 1 << 20

// These errors are wrapped by Verify and ParseSums.
var (
	// ErrBadSums is returned when SHA256SUMS is not a checksum list.
	ErrBadSums = errors.New("malformed SHA256SUMS")
	// ErrMismatch is returned when a listed file is missing or its digest
	// differs.
	ErrMismatch = errors.New("checksum mismatch")
	// ErrUnlisted is returned when the directory holds a file the list
	// does not name.
	ErrUnlisted = errors.New("file not in SHA256SUMS")
	// ErrBadSignature is returned when SHA256SUMS.sig is missing,
	// malformed, or not a good signature by a trusted key.
	ErrBadSignature = errors.New("bad release signature")
)

// Sum is one line of SHA256SUMS.
type Sum struct {
	Name   string // file name, no directory
	SHA256 string // lower-case hex
}

// ParseSums reads a sha256sum-format list: "<64 hex>  <name>" or
// "<64 hex> *<name>" per line. Names must be plain file names (no
// directories) and appear once.
func ParseSums(data []byte) ([]Sum, error) {
	if len(data) > maxSums {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrBadSums, maxSums)
	}
	var out []Sum
	seen := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		if len(line) < 67 || (line[64:66] != "  " && line[64:66] != " *") {
			return nil, fmt.Errorf("%w: line %d: want \"<sha256 hex>  <file>\"", ErrBadSums, n)
		}
		digest, name := line[:64], line[66:]
		if _, err := hex.DecodeString(digest); err != nil || strings.ToLower(digest) != digest {
			return nil, fmt.Errorf("%w: line %d: %q is not a lower-case hex sha256", ErrBadSums, n, digest)
		}
		if name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") || strings.TrimSpace(name) != name {
			return nil, fmt.Errorf("%w: line %d: %q is not a plain file name", ErrBadSums, n, name)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: line %d: %s listed twice", ErrBadSums, n, name)
		}
		seen[name] = true
		out = append(out, Sum{Name: name, SHA256: digest})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSums, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no files listed", ErrBadSums)
	}
	return out, nil
}

// FormatSums writes the list in sha256sum's format, sorted by name.
func FormatSums(sums []Sum) []byte {
	s := append([]Sum(nil), sums...)
	sort.Slice(s, func(i, j int) bool { return s[i].Name < s[j].Name })
	var b bytes.Buffer
	for _, x := range s {
		fmt.Fprintf(&b, "%s  %s\n", x.SHA256, x.Name)
	}
	return b.Bytes()
}

// FileSHA256 returns the hex sha256 of a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// releaseFiles lists the regular files of dir that belong in the list:
// everything but the list and its signature.
func releaseFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Name() == SumsFile || e.Name() == SigFile || !e.Type().IsRegular() {
			continue
		}
		names = append(names, e.Name())
	}
	return names, nil
}

// Sign writes dir/SHA256SUMS over every regular file of dir and
// dir/SHA256SUMS.sig, its signature naming the key. It returns the list.
func Sign(dir string, priv ed25519.PrivateKey) ([]Sum, error) {
	names, err := releaseFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("release: %s holds no files to sign", dir)
	}
	var sums []Sum
	for _, n := range names {
		d, err := FileSHA256(filepath.Join(dir, n))
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		sums = append(sums, Sum{Name: n, SHA256: d})
	}
	list := FormatSums(sums)
	pub := priv.Public().(ed25519.PublicKey)
	sig := "ed25519:" + design.KeyID(pub) + ":" + strings.TrimPrefix(design.Sign(priv, list), "ed25519:")
	if err := atomicfile.WriteFile(filepath.Join(dir, SumsFile), list, 0o644); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, SigFile), []byte(sig+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	return sums, nil
}

// Verify checks dir/SHA256SUMS.sig over dir/SHA256SUMS against the trusted
// keys, then every listed file's digest, and that dir holds no file the
// list does not name. It returns the verified list; any error wraps
// design.ErrBadSignature, ErrBadSums, ErrMismatch or ErrUnlisted.
func Verify(dir string, trusted []ed25519.PublicKey) ([]Sum, error) {
	list, err := readLimit(filepath.Join(dir, SumsFile))
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	sig, err := readLimit(filepath.Join(dir, SigFile))
	if err != nil {
		return nil, fmt.Errorf("release: %w: %w", ErrBadSignature, err)
	}
	if err := verifySig(trusted, list, string(sig)); err != nil {
		return nil, fmt.Errorf("release: %s: %w", SumsFile, err)
	}
	sums, err := ParseSums(list)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	var errs []error
	listed := map[string]bool{}
	for _, s := range sums {
		listed[s.Name] = true
		d, err := FileSHA256(filepath.Join(dir, s.Name))
		switch {
		case errors.Is(err, os.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s: %w: missing", s.Name, ErrMismatch))
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
		case d != s.SHA256:
			errs = append(errs, fmt.Errorf("%s: %w: sha256 %s, SHA256SUMS says %s", s.Name, ErrMismatch, d, s.SHA256))
		}
	}
	names, err := releaseFiles(dir)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	for _, n := range names {
		if !listed[n] {
			errs = append(errs, fmt.Errorf("%s: %w", n, ErrUnlisted))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("release %s: %w", dir, errors.Join(errs...))
	}
	return sums, nil
}

func readLimit(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSums+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSums {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxSums)
	}
	return data, nil
}

// verifySig checks a signature in the form design.ParseSignature reads;
// one naming its key is checked against that key only.
func verifySig(trusted []ed25519.PublicKey, data []byte, sig string) error {
	if len(trusted) == 0 {
		return fmt.Errorf("%w: no trusted key given", ErrBadSignature)
	}
	keyID, raw, err := design.ParseSignature(sig)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadSignature, SigFile, err)
	}
	named := false
	for _, k := range trusted {
		if keyID != "" && design.KeyID(k) != keyID {
			continue
		}
		named = true
		if ed25519.Verify(k, data, raw) {
			return nil
		}
	}
	if !named {
		return fmt.Errorf("%w: signed by key %s, which is not trusted", ErrBadSignature, keyID)
	}
	return fmt.Errorf("%w: the signature does not match the bytes of %s under any trusted key", ErrBadSignature, SumsFile)
}
