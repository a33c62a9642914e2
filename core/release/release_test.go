package release

import (
	"crypto/ed25519"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func key(t *testing.T, seed byte) ed25519.PrivateKey {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	return ed25519.NewKeyFromSeed(s)
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

func release(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"openstarry-linux-arm64":       "arm64 binary",
		"openstarry_1.0.0_armhf.deb":   "a package",
		"openstarry-windows-amd64.exe": "MZ",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestSignVerify: a signed release verifies; each way of breaking it is
// refused with its own error.
func TestSignVerify(t *testing.T) {
	k := key(t, 1)
	for _, tc := range []struct {
		name    string
		breakIt func(t *testing.T, dir string)
		keys    []ed25519.PublicKey
		want    error
		text    string
	}{
		{name: "good", keys: []ed25519.PublicKey{pub(key(t, 2)), pub(k)}},
		{name: "untrusted key", keys: []ed25519.PublicKey{pub(key(t, 2))}, want: ErrBadSignature, text: "not trusted"},
		{name: "no key", want: ErrBadSignature, text: "no trusted key"},
		{name: "binary changed", keys: []ed25519.PublicKey{pub(k)}, want: ErrMismatch, text: "openstarry-linux-arm64: checksum mismatch: sha256",
			breakIt: func(t *testing.T, dir string) { write(t, dir, "openstarry-linux-arm64", "arm64 binary!") }},
		{name: "binary missing", keys: []ed25519.PublicKey{pub(k)}, want: ErrMismatch, text: "missing",
			breakIt: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, "openstarry_1.0.0_armhf.deb")) }},
		{name: "file added", keys: []ed25519.PublicKey{pub(k)}, want: ErrUnlisted, text: "extra: file not in SHA256SUMS",
			breakIt: func(t *testing.T, dir string) { write(t, dir, "extra", "x") }},
		{name: "list edited", keys: []ed25519.PublicKey{pub(k)}, want: ErrBadSignature, text: "does not match",
			breakIt: func(t *testing.T, dir string) {
				data, _ := os.ReadFile(filepath.Join(dir, SumsFile))
				write(t, dir, SumsFile, string(data)+strings.Repeat("0", 64)+"  extra\n")
				write(t, dir, "extra", "x")
			}},
		{name: "signature missing", keys: []ed25519.PublicKey{pub(k)}, want: ErrBadSignature,
			breakIt: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, SigFile)) }},
		{name: "signature garbage", keys: []ed25519.PublicKey{pub(k)}, want: ErrBadSignature,
			breakIt: func(t *testing.T, dir string) { write(t, dir, SigFile, "ed25519:!!!") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := release(t)
			sums, err := Sign(dir, k)
			if err != nil || len(sums) != 3 {
				t.Fatalf("Sign: %v, %d files", err, len(sums))
			}
			if tc.breakIt != nil {
				tc.breakIt(t, dir)
			}
			got, err := Verify(dir, tc.keys)
			if tc.want == nil {
				if err != nil || len(got) != 3 {
					t.Fatalf("Verify: %v (%d files)", err, len(got))
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("Verify = %v, want %v containing %q", err, tc.want, tc.text)
			}
		})
	}
}

// TestSumsFormat: the list is what sha256sum -c reads, sorted, and
// ParseSums reads it back.
func TestSumsFormat(t *testing.T) {
	dir := release(t)
	if _, err := Sign(dir, key(t, 1)); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) != 3 || !strings.HasSuffix(lines[2], "  openstarry_1.0.0_armhf.deb") {
		t.Fatalf("SHA256SUMS (want 3 lines sorted by name):\n%s", data)
	}
	d, _ := FileSHA256(filepath.Join(dir, "openstarry-linux-arm64"))
	if lines[0] != d+"  openstarry-linux-arm64" {
		t.Fatalf("line %q, want digest %s", lines[0], d)
	}
	sums, err := ParseSums(data)
	if err != nil || len(sums) != 3 {
		t.Fatalf("ParseSums: %v %v", sums, err)
	}
	if string(FormatSums(sums)) != string(data) {
		t.Fatal("FormatSums(ParseSums(x)) != x")
	}
}

func TestParseSumsErrors(t *testing.T) {
	h := strings.Repeat("a", 64)
	for _, tc := range []struct{ name, in, text string }{
		{"empty", "", "no files listed"},
		{"short", "abc  x\n", "line 1"},
		{"one space", h + " x\n", "line 1"},
		{"upper hex", strings.Repeat("A", 64) + "  x\n", "lower-case hex"},
		{"not hex", strings.Repeat("g", 64) + "  x\n", "lower-case hex"},
		{"directory", h + "  ../etc/passwd\n", "plain file name"},
		{"twice", h + "  x\n" + h + " *x\n", "listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseSums([]byte(tc.in))
			if !errors.Is(err, ErrBadSums) || !strings.Contains(err.Error(), tc.text) {
				t.Fatalf("ParseSums(%q) = %v, want %q", tc.in, err, tc.text)
			}
		})
	}
}

func FuzzParseSums(f *testing.F) {
	f.Add([]byte(strings.Repeat("a", 64) + "  openstarry-linux-arm64\n"))
	f.Add([]byte(strings.Repeat("0", 64) + " *x.deb\n\n" + strings.Repeat("1", 64) + "  y\n"))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		sums, err := ParseSums(data)
		if err != nil {
			return
		}
		again, err := ParseSums(FormatSums(sums))
		if err != nil || len(again) != len(sums) {
			t.Fatalf("a parsed list does not parse again: %v", err)
		}
	})
}

func write(t *testing.T, dir, name, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}
