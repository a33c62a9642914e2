package design

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func testKey(t testing.TB, seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	t.Helper()
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	priv := ed25519.NewKeyFromSeed(s)
	return priv.Public().(ed25519.PublicKey), priv
}

func TestSignVerify(t *testing.T) {
	pub, priv := testKey(t, 1)
	other, otherPriv := testKey(t, 2)
	data := tmpl(t, "a", "worker")
	sig := Sign(priv, data)
	if !strings.HasPrefix(sig, "ed25519:") {
		t.Fatalf("sig = %q", sig)
	}
	withID := "ed25519:" + KeyID(pub) + ":" + strings.TrimPrefix(sig, "ed25519:")

	tests := []struct {
		name    string
		keys    []ed25519.PublicKey
		data    []byte
		sig     string
		wantErr string
	}{
		{"good", []ed25519.PublicKey{pub}, data, sig, ""},
		{"good among several", []ed25519.PublicKey{other, pub}, data, sig, ""},
		{"good with key id", []ed25519.PublicKey{other, pub}, data, withID, ""},
		{"key id not trusted", []ed25519.PublicKey{other}, data, withID, "not trusted"},
		{"wrong key", []ed25519.PublicKey{other}, data, sig, "does not match"},
		{"byte changed", []ed25519.PublicKey{pub}, append([]byte{' '}, data...), sig, "does not match"},
		{"unsigned", []ed25519.PublicKey{pub}, data, "", "not signed"},
		{"garbage", []ed25519.PublicKey{pub}, data, "ed25519:!!!", "not base64"},
		{"short", []ed25519.PublicKey{pub}, data, "ed25519:AAAA", "bytes, want 64"},
		{"other scheme", []ed25519.PublicKey{pub}, data, "rsa:AAAA", "want"},
		{"no keys", nil, data, sig, "no trusted keys"},
		{"signed by other", []ed25519.PublicKey{pub}, data, Sign(otherPriv, data), "does not match"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Verify(tc.keys, tc.data, tc.sig)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrBadSignature) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want ErrBadSignature with %q", err, tc.wantErr)
			}
		})
	}
}

func TestKeyParsing(t *testing.T) {
	pub, priv := testKey(t, 3)
	for _, s := range []string{EncodePublicKey(pub), "ed25519:" + EncodePublicKey(pub), " " + EncodePublicKey(pub) + "\n"} {
		k, err := ParsePublicKey(s)
		if err != nil || !k.Equal(pub) {
			t.Errorf("ParsePublicKey(%q) = %v, %v", s, k, err)
		}
	}
	if _, err := ParsePublicKey("AAAA"); err == nil {
		t.Error("short public key accepted")
	}
	seed := priv.Seed()
	for _, s := range []string{b64(priv), b64(seed)} {
		k, err := ParsePrivateKey(s)
		if err != nil || !k.Equal(priv) {
			t.Errorf("ParsePrivateKey = %v", err)
		}
	}
	dir := t.TempDir()
	pubFile := filepath.Join(dir, "k.pub")
	os.WriteFile(pubFile, []byte(EncodePublicKey(pub)+"\n"), 0o644)
	for _, s := range []string{EncodePublicKey(pub), pubFile} {
		k, err := ParseTrustedKey(s)
		if err != nil || !k.Equal(pub) {
			t.Errorf("ParseTrustedKey(%q) = %v", s, err)
		}
	}
	if _, err := ParseTrustedKey(filepath.Join(dir, "missing.pub")); err == nil {
		t.Error("missing key file accepted")
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func TestGenerateKeyFilesAndSignFile(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "fleet")
	pub, err := GenerateKeyFiles(prefix, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		st, _ := os.Stat(prefix + ".key")
		if st.Mode().Perm() != 0o600 {
			t.Errorf("key mode %o, want 600", st.Mode().Perm())
		}
	}
	if _, err := GenerateKeyFiles(prefix, false, nil); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second keygen: %v", err)
	}
	priv, err := ReadPrivateKeyFile(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	pubData, _ := os.ReadFile(prefix + ".pub")
	if k, err := ParsePublicKey(string(pubData)); err != nil || !k.Equal(pub) || !priv.Public().(ed25519.PublicKey).Equal(pub) {
		t.Fatal("key pair does not match")
	}

	path := filepath.Join(dir, "w.json")
	writeFiles(t, dir, map[string][]byte{"w.json": tmpl(t, "w", "worker"), "bad.json": []byte("{")})
	sigPath, err := SignFile(Validator{}, priv, path, true)
	if err != nil {
		t.Fatal(err)
	}
	sig, _ := os.ReadFile(sigPath)
	data, _ := os.ReadFile(path)
	if err := Verify([]ed25519.PublicKey{pub}, data, string(sig)); err != nil {
		t.Fatal(err)
	}
	if id, _, _ := ParseSignature(string(sig)); id != KeyID(pub) {
		t.Errorf("key id %q, want %q", id, KeyID(pub))
	}
	if _, err := SignFile(Validator{}, priv, filepath.Join(dir, "bad.json"), false); !errors.Is(err, ErrInvalidTemplate) {
		t.Errorf("signing an invalid template: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.json.sig")); err == nil {
		t.Error("an invalid template was signed")
	}

	if runtime.GOOS != "windows" {
		os.Chmod(prefix+".key", 0o644)
		if _, err := ReadPrivateKeyFile(prefix + ".key"); err == nil || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("world-readable key accepted: %v", err)
		}
	}
}
