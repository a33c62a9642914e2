package design

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// SignatureHeader carries a template's detached signature in a design-layer
// response: "ed25519:<base64 signature>" or "ed25519:<key id>:<base64
// signature>", over the exact body bytes.
const SignatureHeader = "X-Openstarry-Signature"

const sigScheme = "ed25519"

// KeyID names a public key: the first 8 bytes of its sha256, in hex. It lets
// a signature say which trusted key made it; it is a hint, not a secret.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// Sign returns the detached signature of data as "ed25519:<base64>", the
// form of a .sig file and of the signature header.
func Sign(priv ed25519.PrivateKey, data []byte) string {
	return sigScheme + ":" + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, data))
}

// ParseSignature splits "ed25519:<base64>" or "ed25519:<key id>:<base64>".
// keyID is "" when the signature does not name its key.
func ParseSignature(s string) (keyID string, sig []byte, err error) {
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] != sigScheme {
		return "", nil, fmt.Errorf("%w: want \"ed25519:<base64>\" or \"ed25519:<key id>:<base64>\"", ErrBadSignature)
	}
	if len(parts) == 3 {
		keyID = parts[1]
	}
	sig, err = base64.StdEncoding.DecodeString(parts[len(parts)-1])
	if err != nil {
		return "", nil, fmt.Errorf("%w: signature is not base64: %v", ErrBadSignature, err)
	}
	if len(sig) != ed25519.SignatureSize {
		return "", nil, fmt.Errorf("%w: signature is %d bytes, want %d", ErrBadSignature, len(sig), ed25519.SignatureSize)
	}
	return keyID, sig, nil
}

// Verify checks sig (as ParseSignature reads it) over data against the
// trusted keys. A signature naming a key id is checked against that key
// only. Every failure wraps ErrBadSignature.
func Verify(trusted []ed25519.PublicKey, data []byte, sig string) error {
	if len(trusted) == 0 {
		return fmt.Errorf("%w: no trusted keys configured", ErrBadSignature)
	}
	if strings.TrimSpace(sig) == "" {
		return fmt.Errorf("%w: the template is not signed", ErrBadSignature)
	}
	keyID, raw, err := ParseSignature(sig)
	if err != nil {
		return err
	}
	named := false
	for _, k := range trusted {
		if keyID != "" && KeyID(k) != keyID {
			continue
		}
		named = true
		if ed25519.Verify(k, data, raw) {
			return nil
		}
	}
	if keyID != "" && !named {
		return fmt.Errorf("%w: signed by key %s, which is not trusted", ErrBadSignature, keyID)
	}
	return fmt.Errorf("%w: the signature does not match the template's bytes under any trusted key", ErrBadSignature)
}

// EncodePublicKey returns the base64 form of a public key, the content of a
// .pub file and of a design.trusted_keys entry.
func EncodePublicKey(pub ed25519.PublicKey) string {
	return base64.StdEncoding.EncodeToString(pub)
}

// ParsePublicKey reads a base64 ed25519 public key, with or without an
// "ed25519:" prefix.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), sigScheme+":")
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("design: public key is not base64: %v", err)
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("design: public key is %d bytes, want %d", len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), nil
}

// ParseTrustedKey reads one design.trusted_keys entry: a base64 public key,
// or the path of a .pub file holding one.
func ParseTrustedKey(s string) (ed25519.PublicKey, error) {
	if k, err := ParsePublicKey(s); err == nil {
		return k, nil
	}
	data, err := os.ReadFile(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("design: trusted key %q is neither a base64 ed25519 public key nor a readable file: %v", s, err)
	}
	k, err := ParsePublicKey(string(data))
	if err != nil {
		return nil, fmt.Errorf("design: trusted key file %s: %w", s, err)
	}
	return k, nil
}

// ParsePrivateKey reads a base64 ed25519 private key: the 64-byte form a
// .key file holds, or a 32-byte seed.
func ParsePrivateKey(s string) (ed25519.PrivateKey, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), sigScheme+":")
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("design: private key is not base64")
	}
	switch len(b) {
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(b), nil
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(b), nil
	default:
		return nil, fmt.Errorf("design: private key is %d bytes, want %d (or a %d-byte seed)", len(b), ed25519.PrivateKeySize, ed25519.SeedSize)
	}
}

// ReadPrivateKeyFile reads a .key file. On Unix it refuses a file that group
// or others may read, as ssh does: a signing key that leaked signs anything.
func ReadPrivateKeyFile(path string) (ed25519.PrivateKey, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("design: signing key: %w", err)
	}
	if runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("design: signing key %s is accessible by group or others (mode %04o); run chmod 600 %s", path, st.Mode().Perm(), path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("design: signing key: %w", err)
	}
	k, err := ParsePrivateKey(string(data))
	if err != nil {
		return nil, fmt.Errorf("%w (in %s)", err, path)
	}
	return k, nil
}

// GenerateKeyFiles creates a key pair: prefix+".key" (the private key,
// mode 0600) and prefix+".pub" (the public key, mode 0644), both base64 with
// a final newline. It refuses to replace existing files unless overwrite.
// rnd is the entropy source; nil means crypto/rand.
func GenerateKeyFiles(prefix string, overwrite bool, rnd io.Reader) (ed25519.PublicKey, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	pub, priv, err := ed25519.GenerateKey(rnd)
	if err != nil {
		return nil, fmt.Errorf("design: generate key: %w", err)
	}
	flags := os.O_WRONLY | os.O_CREATE | os.O_EXCL
	if overwrite {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	write := func(path string, perm os.FileMode, content string) error {
		f, err := os.OpenFile(path, flags, perm)
		if err != nil {
			if errors.Is(err, os.ErrExist) {
				return fmt.Errorf("design: %s exists; refusing to replace a key (use --force)", path)
			}
			return fmt.Errorf("design: %w", err)
		}
		if err := f.Chmod(perm); err != nil && runtime.GOOS != "windows" {
			f.Close()
			return fmt.Errorf("design: %w", err)
		}
		if _, err := io.WriteString(f, content+"\n"); err != nil {
			f.Close()
			return fmt.Errorf("design: write %s: %w", path, err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("design: sync %s: %w", path, err)
		}
		return f.Close()
	}
	if !overwrite {
		// Check both first so that a half-made pair is not left behind.
		for _, p := range []string{prefix + ".key", prefix + ".pub"} {
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("design: %s exists; refusing to replace a key (use --force)", p)
			}
		}
	}
	if err := write(prefix+".key", 0o600, base64.StdEncoding.EncodeToString(priv)); err != nil {
		return nil, err
	}
	if err := write(prefix+".pub", 0o644, EncodePublicKey(pub)); err != nil {
		return nil, err
	}
	return pub, nil
}

// SignFile validates the template at path on its own (schema, rules, and
// its file name NAME.json) and writes path+".sig" with its signature. With
// withKeyID the signature names the key ("ed25519:<key id>:<base64>"). It
// returns the .sig path.
func SignFile(v Validator, priv ed25519.PrivateKey, path string, withKeyID bool) (string, error) {
	data, err := readFileLimit(path)
	if err != nil {
		return "", fmt.Errorf("design: sign %s: %w", path, err)
	}
	t, err := v.Validate(path, data)
	if err != nil {
		return "", fmt.Errorf("design: refusing to sign an invalid template:\n%w", err)
	}
	if base := filepath.Base(path); base != t.Name+".json" {
		return "", fmt.Errorf("design: refusing to sign %s: %w", path, ValidationErrors{{File: path, Path: "/name", Rule: RuleFileName,
			Message: fmt.Sprintf("name %q does not match the file name %q (want %s.json)", t.Name, base, t.Name)}})
	}
	sig := Sign(priv, data)
	if withKeyID {
		sig = sigScheme + ":" + KeyID(priv.Public().(ed25519.PublicKey)) + ":" + strings.TrimPrefix(sig, sigScheme+":")
	}
	sigPath := path + ".sig"
	if err := atomicfile.WriteFile(sigPath, []byte(sig+"\n"), 0o644); err != nil {
		return "", err
	}
	return sigPath, nil
}
