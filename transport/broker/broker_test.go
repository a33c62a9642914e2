package broker

import (
	"bufio"
	"bytes"
	"context"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/logbuf"
	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

func startBroker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	cfg.Log = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

type connectResult struct {
	client paho.Client
	rc     byte
	err    error
}

func connect(t *testing.T, url, id, user, pass string, clean bool, handler paho.MessageHandler) connectResult {
	t.Helper()
	o := paho.NewClientOptions().AddBroker(url).SetClientID(id).SetCleanSession(clean).
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(5 * time.Second)
	if user != "" {
		o.SetUsername(user).SetPassword(pass)
	}
	if handler != nil {
		o.SetDefaultPublishHandler(handler)
	}
	c := paho.NewClient(o)
	tok := c.Connect()
	tok.WaitTimeout(10 * time.Second)
	res := connectResult{client: c, rc: tok.(*paho.ConnectToken).ReturnCode(), err: tok.Error()}
	if res.err == nil {
		t.Cleanup(func() { c.Disconnect(50) })
	}
	return res
}

func TestBrokerSlogBridge(t *testing.T) {
	var buf bytes.Buffer
	h := NewSlogHandler(zerolog.New(&buf).Level(zerolog.InfoLevel))
	log := slog.New(h)
	log.Debug("hidden")
	log.Info("hello", "n", 3, "ok", true, "err", errors.New("boom"))
	log.With("client", "c1").WithGroup("pk").Warn("careful", "id", 7, slog.Group("props", "qos", 1))
	log.Error("bad", "packet", map[string]string{"payload": strings.Repeat("x", 4000)})
	h.Demote = func(r slog.Record) bool { return r.Message == "noise" }
	log.Error("noise")

	var lines []map[string]any
	sc := bufio.NewScanner(&buf)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not JSON: %s", sc.Text())
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 {
		t.Fatalf("want 3 lines (debug and demoted records hidden at info), got %d: %v", len(lines), lines)
	}
	want := []map[string]any{
		{"level": "info", "message": "hello", "n": float64(3), "ok": true, "error": "boom"},
		{"level": "warn", "message": "careful", "client": "c1", "pk.id": float64(7), "pk.props.qos": float64(1)},
		{"level": "error", "message": "bad"},
	}
	for i, w := range want {
		for k, v := range w {
			if lines[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, lines[i][k], v, lines[i])
			}
		}
	}
	if p, _ := lines[2]["packet"].(string); len(p) > maxAttrBytes+8 || !strings.HasSuffix(p, "…") {
		t.Errorf("a large attribute is not cut: %d bytes", len(p))
	}
}

func TestBrokerPasswordHashes(t *testing.T) {
	// Hashes made by the real mosquitto_passwd, in both its formats.
	bin := mqtttest.Binary(t, "mosquitto_passwd")
	dir := t.TempDir()
	for _, algo := range []string{"sha512-pbkdf2", "sha512"} {
		path := filepath.Join(dir, algo)
		if out, err := runCmd(bin, "-H", algo, "-c", "-b", path, "alice", "s3cret pass"); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
		data, _ := os.ReadFile(path)
		_, hash, _ := strings.Cut(strings.TrimSpace(string(data)), ":")
		ph, err := ParsePasswordHash(hash)
		if err != nil {
			t.Fatalf("%s: %v (%s)", algo, err, hash)
		}
		if !ph.Verify("s3cret pass") {
			t.Errorf("%s: the right password is refused", algo)
		}
		if ph.Verify("s3cret pasS") || ph.Verify("") {
			t.Errorf("%s: a wrong password is accepted", algo)
		}
	}

	h, err := HashPassword("pw")
	if err != nil {
		t.Fatal(err)
	}
	if ph, err := ParsePasswordHash(h); err != nil || !ph.Verify("pw") || ph.Verify("pw2") {
		t.Fatalf("HashPassword round trip: %v", err)
	}

	salt := []byte("0123456789ab")
	k, _ := pbkdf2.Key(sha256.New, "pw", salt, 1000, 32)
	h256 := fmt.Sprintf("pbkdf2-sha256$1000$%s$%s", base64.StdEncoding.EncodeToString(salt), base64.StdEncoding.EncodeToString(k))
	if ph, err := ParsePasswordHash(h256); err != nil || !ph.Verify("pw") || ph.Verify("px") {
		t.Fatalf("pbkdf2-sha256: %v", err)
	}

	for _, bad := range []string{"", "pw", "$7$x$c2FsdA==$aGFzaA==", "$7$10$!!$aGFzaA==", "$6$c2FsdA==$c2hvcnQ=", "$1$a$b", "plain:text"} {
		if _, err := ParsePasswordHash(bad); !errors.Is(err, ErrBadPasswordHash) {
			t.Errorf("ParsePasswordHash(%q) = %v, want ErrBadPasswordHash", bad, err)
		}
	}
}

func TestBrokerUsersFile(t *testing.T) {
	dir := t.TempDir()
	h, _ := HashPassword("pw")
	good := filepath.Join(dir, "users.json")
	os.WriteFile(good, []byte(`{"users":[{"username":"dev1","password_hash":"`+h+`"},{"username":"hub","password_hash":"`+h+`","role":"hub"}]}`), 0o600)
	users, err := LoadUsers(good)
	if err != nil || len(users) != 2 {
		t.Fatalf("LoadUsers: %v %v", users, err)
	}
	for name, body := range map[string]string{
		"unknown field": `{"users":[{"username":"a","password_hash":"` + h + `","pasword":"x"}]}`,
		"clear text":    `{"users":[{"username":"a","password_hash":"secret"}]}`,
		"bad role":      `{"users":[{"username":"a","password_hash":"` + h + `","role":"root"}]}`,
		"bad device":    `{"users":[{"username":"a","password_hash":"` + h + `","device":"../x"}]}`,
		"twice":         `{"users":[{"username":"a","password_hash":"` + h + `"},{"username":"a","password_hash":"` + h + `"}]}`,
	} {
		p := filepath.Join(dir, "bad.json")
		os.WriteFile(p, []byte(body), 0o600)
		if _, err := LoadUsers(p); err == nil {
			t.Errorf("%s: LoadUsers accepted %s", name, body)
		}
	}
}

// TestBrokerRefusalLogged: with the broker's logger at info (the default)
// and its chatter demoted, a client refused for a bad password is logged
// at warn with its user name, so an operator sees why a hub cannot log in.
func TestBrokerRefusalLogged(t *testing.T) {
	h, _ := HashPassword("dev1-pw")
	var buf logbuf.Buffer
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Users: []User{{Username: "dev1", PasswordHash: h}},
		Log: zerolog.New(&buf).Level(zerolog.InfoLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if r := connect(t, b.URL(), "wrong", "dev1", "nope", true, nil); r.err == nil {
		t.Fatal("wrong password accepted")
	}
	var logs string
	if wait.Poll(5*time.Second, func() error {
		logs = buf.String()
		if strings.Contains(logs, `"level":"warn"`) && strings.Contains(logs, "refused client: bad user name or password") &&
			strings.Contains(logs, `"username":"dev1"`) {
			return nil
		}
		return errors.New("not logged")
	}) != nil {
		t.Fatalf("no warning for the refused client at info level:\n%s", logs)
	}
	if strings.Contains(buf.String(), `"level":"debug"`) {
		t.Fatalf("debug lines at info level:\n%s", buf.String())
	}
}

func TestBrokerAuthAndACL(t *testing.T) {
	h, _ := HashPassword("dev1-pw")
	hh, _ := HashPassword("hub-pw")
	b := startBroker(t, Config{Users: []User{
		{Username: "dev1", PasswordHash: h},
		{Username: "hub", PasswordHash: hh, Role: RoleHub},
	}})
	url := b.URL()

	if r := connect(t, url, "anon", "", "", true, nil); r.err != nil {
		t.Fatalf("anonymous loopback client refused: %v", r.err)
	}
	if r := connect(t, url, "wrong", "dev1", "nope", true, nil); r.err == nil || (r.rc != 4 && r.rc != 5) {
		t.Fatalf("wrong password: err %v rc %d, want a refusal (4 or 5)", r.err, r.rc)
	}
	if r := connect(t, url, "ghost", "ghost", "dev1-pw", true, nil); r.err == nil {
		t.Fatal("unknown user accepted")
	}

	got := make(chan string, 16)
	hub := connect(t, url, "hub", "hub", "hub-pw", true, func(_ paho.Client, m paho.Message) { got <- m.Topic() })
	if hub.err != nil {
		t.Fatal(hub.err)
	}
	if tok := hub.client.Subscribe("openstarry/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal("hub subscribe")
	}

	dev := connect(t, url, "dev1", "dev1", "dev1-pw", true, nil)
	if dev.err != nil {
		t.Fatal(dev.err)
	}
	tok := dev.client.SubscribeMultiple(map[string]byte{
		"openstarry/dev1/agents/a/tasks":           1,
		"$share/openstarry/openstarry/fleet/tasks": 1,
		"openstarry/dev2/agents/a/tasks":           1,
		"openstarry/+/agents/a/tasks":              1,
		"#":                                        1,
	}, nil)
	tok.WaitTimeout(5 * time.Second)
	res := tok.(*paho.SubscribeToken).Result()
	for topic, want := range map[string]bool{
		"openstarry/dev1/agents/a/tasks":           true,
		"$share/openstarry/openstarry/fleet/tasks": true,
		"openstarry/dev2/agents/a/tasks":           false,
		"openstarry/+/agents/a/tasks":              false,
		"#":                                        false,
	} {
		if granted := res[topic] <= 2; granted != want {
			t.Errorf("device subscribe %s: code %#x, want granted=%v", topic, res[topic], want)
		}
	}
	// Its own topic reaches the hub.
	mqtttest.Publish(t, dev.client, "openstarry/dev1/status", []byte("x"))
	select {
	case topic := <-got:
		if topic != "openstarry/dev1/status" {
			t.Fatalf("hub got %s", topic)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a device's publication to its own topic did not arrive")
	}
	// Another device's topic and the fleet topic do not (MQTT 3.1.1: the
	// broker drops the client).
	for _, topic := range []string{"openstarry/dev2/status", "openstarry/fleet/tasks"} {
		d := connect(t, url, "dev1-"+strings.ReplaceAll(topic, "/", "_"), "dev1", "dev1-pw", true, nil)
		d.client.Publish(topic, 1, false, "x").WaitTimeout(2 * time.Second)
		select {
		case topic := <-got:
			t.Fatalf("a device published to %s", topic)
		case <-time.After(300 * time.Millisecond):
		}
	}
}

func TestBrokerAnonymousOnlyFromLoopback(t *testing.T) {
	h, _ := HashPassword("pw")
	hook, err := newAuthHook([]User{{Username: "dev1", PasswordHash: h}}, "openstarry")
	if err != nil {
		t.Fatal(err)
	}
	hook.Log = slog.New(slog.DiscardHandler)
	srv := mqtt.New(nil)
	for _, tc := range []struct {
		remote, user, pass string
		want               bool
	}{
		{"127.0.0.1:5000", "", "", true},
		{"[::1]:5000", "", "", true},
		{"192.168.1.20:5000", "", "", false},
		{"10.0.0.1:5000", "dev1", "pw", true},
		{"10.0.0.1:5000", "dev1", "pw2", false},
	} {
		cl := srv.NewClient(nil, "tcp", "c", false)
		cl.Net.Remote = tc.remote
		pk := packets.Packet{Connect: packets.ConnectParams{Username: []byte(tc.user), Password: []byte(tc.pass)}}
		if got := hook.OnConnectAuthenticate(cl, pk); got != tc.want {
			t.Errorf("%s user %q: admitted=%v, want %v", tc.remote, tc.user, got, tc.want)
		}
	}
}

func TestBrokerDeviceACL(t *testing.T) {
	for _, tc := range []struct {
		topic string
		write bool
		want  bool
	}{
		{"openstarry/d1/agents/a/results", true, true},
		{"openstarry/d1/#", false, true},
		{"openstarry/d2/agents/a/results", true, false},
		{"openstarry/d1", true, false},
		{"openstarry/d10/x", true, false},
		{"openstarry/fleet/tasks", false, true},
		{"openstarry/fleet/tasks", true, false},
		{"$share/g/openstarry/fleet/tasks", false, true},
		{"$share/g/openstarry/d2/x", false, false},
		{"$share//openstarry/fleet/tasks", false, false},
		{"openstarry/+/agents/a/tasks", false, false},
		{"$SYS/broker/clients", false, false},
	} {
		if got := DeviceMayUse("openstarry", "d1", tc.topic, tc.write); got != tc.want {
			t.Errorf("DeviceMayUse(%s, write=%v) = %v, want %v", tc.topic, tc.write, got, tc.want)
		}
	}
}

// TestBrokerPersistence: a persistent session, its subscription and the
// QoS 1 messages queued for it while offline survive a broker restart.
func TestBrokerPersistence(t *testing.T) {
	dir := t.TempDir()
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	addr := b.Addr().String()
	sub := connect(t, b.URL(), "agent-1", "", "", false, nil)
	if sub.err != nil {
		t.Fatal(sub.err)
	}
	if tok := sub.client.Subscribe("openstarry/d/agents/a/tasks", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatal("subscribe")
	}
	sub.client.Disconnect(50)

	pub := connect(t, b.URL(), "pub", "", "", true, nil)
	for i := range 5 {
		mqtttest.Publish(t, pub.client, "openstarry/d/agents/a/tasks", fmt.Appendf(nil, "m%d", i))
	}
	pub.client.Disconnect(50)
	b.Close()

	b2, err := Start(context.Background(), Config{Listen: addr, DataDir: dir, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	got := make(chan string, 10)
	again := connect(t, b2.URL(), "agent-1", "", "", false, func(_ paho.Client, m paho.Message) { got <- string(m.Payload()) })
	if again.err != nil {
		t.Fatal(again.err)
	}
	seen := map[string]bool{}
	for len(seen) < 5 {
		select {
		case m := <-got:
			seen[m] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("after the restart only %v arrived", seen)
		}
	}
}

func TestBrokerListen(t *testing.T) {
	var buf logbuf.Buffer // read while mochi's event loop logs
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", Log: zerolog.New(&buf)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !strings.Contains(buf.String(), "embedded broker listening on "+b.Addr().String()) {
		t.Errorf("no listening line for %s in %s", b.Addr(), buf.String())
	}
	if strings.Contains(buf.String(), `"level":"error"`) {
		t.Errorf("a fresh broker logs an error: %s", buf.String())
	}
	_, err = Start(context.Background(), Config{Listen: b.Addr().String()})
	if !errors.Is(err, ErrAddrInUse) {
		t.Fatalf("second broker on %s: %v, want ErrAddrInUse", b.Addr(), err)
	}
}

func TestBrokerDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	startBroker(t, Config{DataDir: dir})
	_, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "locked by another process") {
		t.Fatalf("second broker on one data directory: %v", err)
	}
}

func runCmd(name string, args ...string) ([]byte, error) {
	return exec.Command(name, args...).CombinedOutput()
}
