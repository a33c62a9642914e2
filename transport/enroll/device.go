package enroll

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/design"
)

// Files of a device under DATA/enroll (0700): its key pair and the
// credentials it was given, all 0600.
const (
	KeyFile         = "device.key"
	PubFile         = "device.pub"
	CredentialsFile = "credentials.json"
)

// Dir is the enrolment directory of a data directory.
func Dir(data string) string { return filepath.Join(data, "enroll") }

// LoadOrCreateKey returns the device's key, creating the pair the first
// time.
func LoadOrCreateKey(dir string) (ed25519.PrivateKey, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	k, err := design.ReadPrivateKeyFile(filepath.Join(dir, KeyFile))
	if err == nil {
		return k, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	if _, err := design.GenerateKeyFiles(filepath.Join(dir, "device"), false, nil); err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, PubFile), 0o600); err != nil {
		return nil, err
	}
	return design.ReadPrivateKeyFile(filepath.Join(dir, KeyFile))
}

// CheckHubURL refuses a hub URL that would carry the token and the
// password in clear off this machine.
func CheckHubURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("hub URL %q: want https://HOST[:PORT] (http:// on loopback only)", raw)
	}
	if u.Scheme == "http" {
		ip := net.ParseIP(u.Hostname())
		if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("hub URL %q: http:// would send the token and the password in clear; use https://", raw)
		}
	}
	return u, nil
}

// Enroll asks the hub at hubURL for credentials with token, as the holder
// of priv; device is the id it asks for ("" lets the hub choose).
func Enroll(ctx context.Context, hc *http.Client, hubURL, token, device string, priv ed25519.PrivateKey) (*Credentials, error) {
	u, err := CheckHubURL(hubURL)
	if err != nil {
		return nil, err
	}
	pub := design.EncodePublicKey(priv.Public().(ed25519.PublicKey))
	body, _ := json.Marshal(Request{Token: token, Device: device, PublicKey: pub,
		Proof: base64.StdEncoding.EncodeToString(ed25519.Sign(priv, ProofMessage(token, pub)))})
	u.Path = "/v1/enroll"
	req, err := http.NewRequestWithContext(ctx, "POST", u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("enroll: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxRequest))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error, Code string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return nil, fmt.Errorf("enroll: the hub refused (%s): %s", e.Code, e.Error)
		}
		return nil, fmt.Errorf("enroll: the hub answered %s", resp.Status)
	}
	var c Credentials
	if err := json.Unmarshal(data, &c); err != nil || c.Device == "" || c.Username == "" || c.Password == "" {
		return nil, fmt.Errorf("enroll: the hub's answer is not credentials")
	}
	return &c, nil
}

// WriteCredentials stores c in dir, 0600, atomically.
func WriteCredentials(dir string, c *Credentials) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(c, "", "  ")
	return atomicfile.WriteFile(filepath.Join(dir, CredentialsFile), append(b, '\n'), 0o600)
}

// ReadCredentials reads what WriteCredentials stored; nil, nil when the
// device is not enrolled.
func ReadCredentials(dir string) (*Credentials, error) {
	b, err := os.ReadFile(filepath.Join(dir, CredentialsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var c Credentials
	if err := json.Unmarshal(b, &c); err != nil || c.Device == "" {
		return nil, fmt.Errorf("enrolment credentials %s are damaged (%v): enrol again", filepath.Join(dir, CredentialsFile), err)
	}
	return &c, nil
}
