package control

import (
	"crypto/rand"
	"encoding/hex"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
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
	return atomicfile.WriteFile(filepath.Join(runDir, TokenFile), []byte(token+"\n"), 0o600)
}

// RemoveFiles deletes the token, socket and address files at shutdown.
func RemoveFiles(runDir string) {
	for _, f := range []string{TokenFile, SocketFile, AddrFile} {
		_ = os.Remove(filepath.Join(runDir, f))
	}
}
