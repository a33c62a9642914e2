package connpass

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/httpx"
)

// Settings are what an agent is told at spawn (EnvHandoff, JSON): where its
// end of the pair is, and the daemon's rules for its listener, which the
// agent applies to every request of a connection handed to it.
type Settings struct {
	FD    int      `json:"fd"`              // the agent's end of the pair
	Hosts []string `json:"hosts,omitempty"` // http.hosts (httpx.AllowHosts)
	// TokenSHA256 is the hex SHA-256 of http.token, "" when none: the
	// agent checks a bearer token against it, and never holds the token.
	TokenSHA256 string       `json:"token_sha256,omitempty"`
	Limits      httpx.Limits `json:"limits"` // the daemon's listener's
}

// HashToken returns the TokenSHA256 of token ("" for none).
func HashToken(token string) string {
	if token == "" {
		return ""
	}
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// AgentOptions are the agent's side of the hand-off.
type AgentOptions struct {
	Settings Settings
	AgentID  string
	// LocalToken is the daemon's per-boot token the agent's API requires
	// (control.EnvAPIToken): a request the agent takes from a handed
	// connection is given it, as the daemon's forward gives it.
	LocalToken string
	// API is the agent's HTTP API, as its own listener serves it; Addr is
	// that listener's host:port (the Host the daemon's forward sends).
	API  http.Handler
	Addr string
	Log  zerolog.Logger
}
