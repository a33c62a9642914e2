package fleet

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func keys(t testing.TB) (ed25519.PublicKey, ed25519.PrivateKey) {
	pub, priv, err := ed25519.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return pub, priv
}

func TestOpen(t *testing.T) {
	pub, priv := keys(t)
	_, other := keys(t)
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	base := Command{ID: "c1", Name: "status", Device: "d1", IssuedAt: now, ExpiresAt: now.Add(time.Minute)}
	with := func(f func(*Command)) Command { c := base; f(&c); return c }
	sign := func(k ed25519.PrivateKey, c Command) []byte { b, _ := Sign(k, c); return b }
	for _, tc := range []struct {
		name    string
		data    []byte
		trusted []ed25519.PublicKey
		topic   string
		code    string
	}{
		{"good", sign(priv, base), []ed25519.PublicKey{pub}, "status", ""},
		{"no trusted key", sign(priv, base), nil, "status", CodeNoKey},
		{"other key", sign(other, base), []ed25519.PublicKey{pub}, "status", CodeUnsigned},
		{"not json", []byte("{"), []ed25519.PublicKey{pub}, "status", CodeBadCommand},
		{"too large", []byte(strings.Repeat(" ", MaxCommandSize+1)), []ed25519.PublicKey{pub}, "status", CodeBadCommand},
		{"topic differs", sign(priv, base), []ed25519.PublicKey{pub}, "logs.tail", CodeBadCommand},
		{"unknown", sign(priv, with(func(c *Command) { c.Name = "reboot" })), []ed25519.PublicKey{pub}, "reboot", CodeBadCommand},
		{"bad id", sign(priv, with(func(c *Command) { c.ID = "../x" })), []ed25519.PublicKey{pub}, "status", CodeBadCommand},
		{"other device", sign(priv, with(func(c *Command) { c.Device = "d2" })), []ed25519.PublicKey{pub}, "status", CodeWrongDev},
		{"expired", sign(priv, with(func(c *Command) { c.ExpiresAt = now })), []ed25519.PublicKey{pub}, "status", CodeExpired},
		{"future", sign(priv, with(func(c *Command) { c.IssuedAt = now.Add(time.Hour); c.ExpiresAt = now.Add(2 * time.Minute) })), []ed25519.PublicKey{pub}, "status", CodeExpired},
		{"too long", sign(priv, with(func(c *Command) { c.ExpiresAt = now.Add(time.Hour) })), []ed25519.PublicKey{pub}, "status", CodeExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, err := Open(tc.trusted, tc.data, "d1", tc.topic, now)
			var r *Refused
			switch {
			case tc.code == "" && (err != nil || cmd.ID != "c1"):
				t.Fatalf("Open = %+v, %v", cmd, err)
			case tc.code != "" && (!errors.As(err, &r) || r.Code != tc.code):
				t.Fatalf("Open error %v, want code %s", err, tc.code)
			}
		})
	}
	// The signature covers the command's bytes: an edited command fails.
	var env Envelope
	_ = json.Unmarshal(sign(priv, base), &env)
	env.Command = json.RawMessage(strings.Replace(string(env.Command), `"d1"`, `"d2"`, 1))
	tampered, _ := json.Marshal(env)
	if _, err := Open([]ed25519.PublicKey{pub}, tampered, "d2", "status", now); err == nil {
		t.Fatal("a tampered command opened")
	}
}

func TestNonces(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nonces.json")
	now := time.Now()
	n, err := OpenNonces(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Record("a", now.Add(time.Minute), now); err != nil {
		t.Fatal(err)
	}
	if err := n.Record("a", now.Add(time.Minute), now); err == nil {
		t.Fatal("a replay was recorded")
	}
	again, err := OpenNonces(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Record("a", now.Add(time.Minute), now); err == nil {
		t.Fatal("a replay after a restart was recorded")
	}
	// Expired ids are forgotten.
	if err := again.Record("a", now.Add(3*time.Minute), now.Add(2*time.Minute)); err != nil {
		t.Fatalf("an id whose command expired: %v", err)
	}
}

func FuzzOpen(f *testing.F) {
	pub, priv := keys(f)
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	good, _ := Sign(priv, Command{ID: "c1", Name: "status", Device: "d1", IssuedAt: now, ExpiresAt: now.Add(time.Minute)})
	for _, s := range [][]byte{good, []byte(`{}`), []byte(`{"command":1,"sig":""}`), []byte(`{"command":{"id":"x"},"sig":"ed25519:AAAA"}`)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := Open([]ed25519.PublicKey{pub}, data, "d1", "status", now)
		if err == nil && (cmd.Device != "d1" || cmd.Name != "status") {
			t.Fatalf("opened %+v", cmd)
		}
	})
}
