package design

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLoadFrozen(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "configs", "templates", "echo.json"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "echo.json")
	misnamed := filepath.Join(dir, "other.json")
	unknown := filepath.Join(dir, "x", "echo.json")
	os.MkdirAll(filepath.Dir(unknown), 0o700)
	for p, data := range map[string][]byte{good: raw, misnamed: raw, unknown: []byte(`{"name":"echo","surprise":1}`)} {
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name, path, digest string
		want               error
	}{
		{"frozen bytes", good, Digest(raw), nil},
		{"changed bytes", good, Digest(append(raw, ' ')), ErrDigest},
		{"missing", filepath.Join(dir, "none.json"), Digest(raw), ErrNotFound},
		{"file name", misnamed, Digest(raw), ErrInvalidTemplate},
		{"unknown field", unknown, Digest([]byte(`{"name":"echo","surprise":1}`)), ErrInvalidTemplate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := LoadFrozen(tc.path, tc.digest)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil || res.Template.Name != "echo" || res.Digest != Digest(raw) || string(res.Raw) != string(raw) {
				t.Fatalf("%+v, %v", res, err)
			}
		})
	}
}
