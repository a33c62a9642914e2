package broker

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsePasswordHash: the password hash reader never panics, and a hash
// it accepts can be verified (a wrong password is refused).
func FuzzParsePasswordHash(f *testing.F) {
	f.Add("$7$101$c2FsdHNhbHRzYWx0$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("$6$c2FsdA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("pbkdf2-sha256$1000$c2FsdA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
	f.Add("$7$0$$")
	f.Add("plain")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := ParsePasswordHash(s)
		if err != nil {
			return
		}
		if h.iter > 2000 {
			return // valid, but too slow to verify in a fuzz loop
		}
		_ = h.Verify("not the password")
	})
}

// FuzzLoadUsers feeds the broker's users file reader arbitrary files: it
// never panics, and what it accepts has a unique, non-empty name a user.
func FuzzLoadUsers(f *testing.F) {
	f.Add([]byte(`{"users":[{"username":"hub","password_hash":"$6$c2FsdA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","role":"hub"}]}`))
	f.Add([]byte(`{"users":[{"username":"","password_hash":"x"}]}`))
	f.Add([]byte(`{"users":null}`))
	f.Add([]byte(`{"users":[{"username":"a","password_hash":"x","extra":1}]}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "users.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		users, err := LoadUsers(path)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, u := range users {
			if u.Username == "" || seen[u.Username] {
				t.Fatalf("accepted users %+v", users)
			}
			seen[u.Username] = true
		}
	})
}
