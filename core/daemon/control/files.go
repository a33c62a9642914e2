package control

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// NewToken returns a fresh random token (256 bits, hex).
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// WriteToken stores the token in runDir/control.token, readable by the
// daemon's user only.
func WriteToken(runDir, token string) error {
	return writeFileAtomic(filepath.Join(runDir, TokenFile), []byte(token+"\n"), 0o600)
}

// RemoveFiles deletes the token, socket and address files at shutdown.
func RemoveFiles(runDir string) {
	for _, f := range []string{TokenFile, SocketFile, AddrFile} {
		_ = os.Remove(filepath.Join(runDir, f))
	}
}

// writeFileAtomic writes a temporary file, syncs it and renames it over
// path.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	name := tmp.Name()
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(name)
		}
	}()
	if err := tmp.Chmod(perm); err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(name, path); err != nil {
		return err
	}
	ok = true
	return nil
}
