package updater

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/update"
)

func TestTrustedKeys(t *testing.T) {
	pub, _, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	good := base64.StdEncoding.EncodeToString(pub)
	for _, tc := range []struct {
		name    string
		keys    []string
		n       int
		wantErr string
	}{
		{"none", nil, 0, ""},
		{"one", []string{good}, 1, ""},
		{"bad", []string{good, "not-a-key"}, 0, "design.trusted_keys: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Design.TrustedKeys = tc.keys
			keys, err := TrustedKeys(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one starting %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(keys) != tc.n {
				t.Fatalf("%d keys, err %v; want %d", len(keys), err, tc.n)
			}
		})
	}
}

// TestDaemonRefusedUpdate: an update that cannot be staged (no such
// binary) changes nothing: no restart is pending, the daemon's context is
// not cancelled, and the next update is not refused as busy.
func TestDaemonRefusedUpdate(t *testing.T) {
	if err := Supported(); err != nil {
		t.Skip(err)
	}
	cfg := config.Default()
	cfg.Data = t.TempDir()
	self := update.Info{Version: "1.0.0"}
	u, ctx, err := NewDaemon(context.Background(), cfg, self, false, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "openstarry")
	for i := 0; i < 2; i++ {
		_, err := u.Update(context.Background(), missing, "cmd-1", false)
		if err == nil || errors.Is(err, update.ErrBusy) {
			t.Fatalf("update %d from a missing file: %v", i+1, err)
		}
	}
	u.AfterUpdate()
	if u.RestartPending() || ctx.Err() != nil {
		t.Fatalf("after a refused update: restart pending %v, context %v", u.RestartPending(), ctx.Err())
	}
}
