package enroll

import (
	"context"
	"crypto/ed25519"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

func login(t *testing.T, url string, c *Credentials) (paho.Client, error) {
	t.Helper()
	pc, err := mqtt.Dial(context.Background(), mqtt.DialOptions{Broker: url, Username: c.Username, Password: c.Password, Timeout: 5 * time.Second})
	if err == nil {
		t.Cleanup(func() { pc.Disconnect(10) })
	}
	return pc, err
}

// TestEnrolDynSec: against a real Mosquitto with the dynamic security
// plugin, a token buys a device its credentials, which log in and may use
// the device's own topics only; a token works once; re-enrolment rotates
// the password and the broker refuses the old one; a device id enrolled
// with one key is not taken by another unless the token is bound to it.
func TestEnrolDynSec(t *testing.T) {
	dir := t.TempDir()
	m := mqtttest.StartMosquitto(t, mqtttest.Options{DynSec: mqtttest.InitDynSec(t, dir, "hub-admin", "admin-secret")})
	state := filepath.Join(dir, "hub")
	hub := &Hub{State: state, Broker: m.URL(), TopicPrefix: "openstarry", Log: zerolog.New(zerolog.NewTestWriter(t)),
		Dial: func(ctx context.Context) (Controller, error) {
			return DialDynSec(ctx, mqtt.DialOptions{Broker: m.URL(), Username: "hub-admin", Password: "admin-secret", Timeout: 5 * time.Second})
		}}
	srv := httptest.NewServer(hub.Handler())
	defer srv.Close()
	ctx := context.Background()
	devDir := filepath.Join(dir, "device", "enroll")
	key, err := LoadOrCreateKey(devDir)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := LoadOrCreateKey(devDir); !again.Equal(key) {
		t.Fatal("the device key changed when loaded again")
	}
	token := func(device string, ttl time.Duration) string {
		tok, err := NewToken(state, device, ttl, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}

	t1 := token("", time.Hour)
	c1, err := Enroll(ctx, nil, srv.URL, t1, "pi-1", key)
	if err != nil {
		t.Fatal(err)
	}
	if c1.Device != "pi-1" || c1.Username != "pi-1" || c1.Broker != m.URL() || len(c1.Password) < 20 {
		t.Fatalf("credentials %+v", c1)
	}
	pc, err := login(t, m.URL(), c1)
	if err != nil {
		t.Fatalf("the new credentials do not log in: %v\n%s", err, m.Logs())
	}
	if err := mqtt.WaitToken(ctx, pc.Publish("openstarry/pi-1/status", 1, true, []byte("online")), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	st := pc.Subscribe("openstarry/pi-2/#", 1, nil)
	st.Wait()
	if codes := st.(*paho.SubscribeToken).Result(); codes["openstarry/pi-2/#"] != 0x80 {
		t.Fatalf("a device may subscribe to another device's topics: %v", codes)
	}
	st = pc.Subscribe("openstarry/pi-1/commands/+", 1, nil)
	st.Wait()
	if codes := st.(*paho.SubscribeToken).Result(); codes["openstarry/pi-1/commands/+"] != 1 {
		t.Fatalf("the device may not subscribe to its commands: %v", codes)
	}

	if _, err := Enroll(ctx, nil, srv.URL, t1, "pi-9", key); err == nil || !strings.Contains(err.Error(), "bad_token") {
		t.Fatalf("a spent token: %v", err)
	}

	// Re-enrolment with the same key rotates the password.
	c2, err := Enroll(ctx, nil, srv.URL, token("", time.Hour), "pi-1", key)
	if err != nil {
		t.Fatal(err)
	}
	if c2.Device != "pi-1" || c2.Password == c1.Password {
		t.Fatalf("re-enrolment: %+v", c2)
	}
	wait.For(t, 5*time.Second, "the old session to be closed", func() bool { return !pc.IsConnectionOpen() })
	if _, err := login(t, m.URL(), c1); err == nil {
		t.Fatal("the broker accepts the old password after rotation")
	}
	if _, err := login(t, m.URL(), c2); err != nil {
		t.Fatalf("the rotated password: %v", err)
	}

	// Another key may not take pi-1 with an unbound token; the token is
	// not spent by the refusal.
	_, other, _ := ed25519.GenerateKey(nil)
	t3 := token("", time.Hour)
	if _, err := Enroll(ctx, nil, srv.URL, t3, "pi-1", other); err == nil || !strings.Contains(err.Error(), "device_taken") {
		t.Fatalf("another key for pi-1: %v", err)
	}
	if c, err := Enroll(ctx, nil, srv.URL, t3, "", other); err != nil || !strings.HasPrefix(c.Device, "dev-") {
		t.Fatalf("the refunded token for a new id: %+v %v", c, err)
	}
	// A token bound to pi-1 replaces its key (a new board).
	if c, err := Enroll(ctx, nil, srv.URL, token("pi-1", time.Hour), "ignored", other); err != nil || c.Device != "pi-1" {
		t.Fatalf("a bound token: %+v %v", c, err)
	}
	if _, err := Enroll(ctx, nil, srv.URL, token("", -time.Second), "pi-3", key); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired token: %v", err)
	}

	// Everything on disk is private.
	if runtime.GOOS != "windows" {
		for _, root := range []string{state, filepath.Dir(devDir)} {
			filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().Perm()&0o077 != 0 {
					t.Errorf("%s: mode %v", p, fi.Mode().Perm())
				}
				return nil
			})
		}
	}
	if err := WriteCredentials(devDir, c2); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadCredentials(devDir); err != nil || *got != *c2 {
		t.Fatalf("read back %+v %v", got, err)
	}
}

func TestCheckHubURL(t *testing.T) {
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"https://hub.example.com", true},
		{"http://127.0.0.1:8088", true},
		{"http://localhost:8088", true},
		{"http://hub.example.com", false},
		{"ftp://hub", false},
		{"hub.example.com", false},
	} {
		if _, err := CheckHubURL(tc.url); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.url, err)
		}
	}
}

// FuzzHandler: whatever the body, the hub answers with a JSON error or
// credentials, never panics, spends no token on a bad request, and names
// no Go type.
func FuzzHandler(f *testing.F) {
	f.Add([]byte(`{"token":"ost_x","public_key":"AAAA","proof":"AAAA"}`))
	f.Add([]byte(`{"token":1}`))
	f.Add([]byte(`{}`))
	hub := &Hub{State: f.TempDir(), Log: zerolog.Nop(), Dial: func(context.Context) (Controller, error) {
		return nil, errors.New("no broker in this test")
	}}
	h := hub.Handler()
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/enroll", strings.NewReader(string(body))))
		if rec.Code == http.StatusOK || !strings.Contains(rec.Body.String(), `"code"`) {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
		if b := rec.Body.String(); strings.Contains(b, "Go value") || strings.Contains(b, "Go struct") {
			t.Fatalf("the answer names a Go type: %s", b)
		}
	})
}

// TestEnrolLeavesOtherClients: against a real Mosquitto with the dynamic
// security plugin holding an operator's client and the plugin's admin,
// enrolling under their names is refused with not_a_device, their
// passwords keep working and they stay enabled; a client the hub has a
// record of but that the broker does not mark as the hub's is refused too;
// the refused token is not spent.
func TestEnrolLeavesOtherClients(t *testing.T) {
	dir := t.TempDir()
	m := mqtttest.StartMosquitto(t, mqtttest.Options{DynSec: mqtttest.InitDynSec(t, dir, "hub-admin", "admin-secret")})
	state := filepath.Join(dir, "hub")
	adminDial := func(ctx context.Context) (*DynSec, error) {
		return DialDynSec(ctx, mqtt.DialOptions{Broker: m.URL(), Username: "hub-admin", Password: "admin-secret", Timeout: 5 * time.Second})
	}
	hub := &Hub{State: state, Broker: m.URL(), TopicPrefix: "openstarry", Log: zerolog.New(zerolog.NewTestWriter(t)),
		Dial: func(ctx context.Context) (Controller, error) { return adminDial(ctx) }}
	srv := httptest.NewServer(hub.Handler())
	defer srv.Close()
	ctx := context.Background()

	// The operator's accounts, made as an operator would.
	ds, err := adminDial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	errs, err := ds.Do(ctx,
		Command{"command": "createRole", "rolename": "dispatch", "acls": []map[string]any{{"acltype": "publishClientSend", "topic": "#", "allow": true}}},
		Command{"command": "createClient", "username": "dispatcher", "password": "disp-secret", "roles": []map[string]any{{"rolename": "dispatch"}}},
		Command{"command": "createClient", "username": "ops", "password": "ops-secret"})
	ds.Close()
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("making the operator's clients: %v %v", err, errs)
	}
	// A record of "ops" in the hub's state (a stale or forged file) does
	// not make the operator's client the hub's.
	if err := os.MkdirAll(filepath.Join(state, "devices"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "devices", "ops.json"), []byte(`{"device":"ops","public_key":"x","enrolments":1}`), 0o600); err != nil {
		t.Fatal(err)
	}

	if _, err := NewToken(state, "hub-admin", time.Hour, time.Now()); !errors.Is(err, ErrNotDevice) {
		t.Fatalf("a token bound to hub-admin: %v", err)
	}
	_, key, _ := ed25519.GenerateKey(nil)
	for _, tc := range []struct{ bound, asked string }{
		{"", "dispatcher"}, {"dispatcher", ""}, {"", "hub-admin"}, {"", "admin"}, {"ops", ""},
	} {
		tok, err := NewToken(state, tc.bound, time.Hour, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		_, err = Enroll(ctx, nil, srv.URL, tok, tc.asked, key)
		if err == nil || !strings.Contains(err.Error(), "not_a_device") {
			t.Fatalf("enrolling as %q (token bound to %q): %v", tc.asked, tc.bound, err)
		}
		t.Logf("the board reads: %v", err)
		if _, err := os.Stat(filepath.Join(state, "tokens", tokenHash(tok)+".json")); err != nil {
			t.Fatalf("the refusal spent the token: %v", err)
		}
	}
	for user, pw := range map[string]string{"dispatcher": "disp-secret", "hub-admin": "admin-secret", "ops": "ops-secret"} {
		if _, err := login(t, m.URL(), &Credentials{Username: user, Password: pw}); err != nil {
			t.Errorf("%s no longer logs in with its own password: %v\n%s", user, err, m.Logs())
		}
	}
	ds, err = adminDial(ctx)
	if err != nil {
		t.Fatalf("the plugin's admin: %v", err)
	}
	defer ds.Close()
	info, err := ds.GetClient(ctx, "dispatcher")
	if err != nil || info == nil || info.Disabled || !info.HasRole("dispatch") || info.HasRole(RoleName("dispatcher")) {
		t.Fatalf("the operator's client was changed: %+v %v", info, err)
	}
}
