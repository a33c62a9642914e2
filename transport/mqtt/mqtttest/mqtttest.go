// Package mqtttest runs a real Mosquitto for tests and gives them an MQTT
// client that records what it receives.
//
// Tests that need Mosquitto fail when it is not installed (CI installs it
// through .ci/run); set OPENSTARRY_SKIP_MOSQUITTO=1 to skip them instead.
package mqtttest

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/loopback"
	"github.com/openstarry/openstarry-edge/internal/testcert"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// Binary returns the path of a Mosquitto tool (mosquitto, mosquitto_passwd),
// failing the test when it is missing, or skipping it when
// OPENSTARRY_SKIP_MOSQUITTO=1.
func Binary(t testing.TB, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/usr/bin", "/opt/homebrew/sbin"} {
		p := filepath.Join(dir, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("OPENSTARRY_SKIP_MOSQUITTO") == "1" {
		t.Skipf("%s is not installed and OPENSTARRY_SKIP_MOSQUITTO=1", name)
	}
	t.Fatalf("%s is not installed (apt-get install mosquitto mosquitto-clients); set OPENSTARRY_SKIP_MOSQUITTO=1 to skip this test", name)
	return ""
}

// Options configure a Mosquitto.
type Options struct {
	// NoPersistence turns persistence off (the default is on, saved after
	// every change so that a SIGKILL loses nothing acknowledged).
	NoPersistence bool
	// PasswordFile, when set, turns anonymous access off.
	PasswordFile string
	// DynSec, when set, is the dynamic security plugin's JSON file (see
	// InitDynSec): the broker loads the plugin, which then decides who
	// logs in and what each client may do; anonymous access is off.
	DynSec string
	// TLS, when set, makes the listener TLS with these PEM files.
	TLS *TLSFiles
	// Extra lines for mosquitto.conf.
	Extra []string
	// Config, when set, is the whole mosquitto.conf instead; "{{PORT}}"
	// and "{{DIR}}" in it become the port and the broker's directory.
	Config string
}

// TLSFiles are the PEM files of a TLS setup (testcert.Write makes them).
type TLSFiles = testcert.Files

// Mosquitto is a broker process of a test.
type Mosquitto struct {
	t    testing.TB
	bin  string
	Dir  string
	Port int
	conf string
	tls  bool

	mu   sync.Mutex // guards cmd, done, log
	cmd  *exec.Cmd
	done chan struct{}
	log  bytes.Buffer
}

// StartMosquitto writes a mosquitto.conf in a temporary directory and runs
// Mosquitto on a free loopback port until the test ends.
func StartMosquitto(t testing.TB, o Options) *Mosquitto {
	t.Helper()
	return StartMosquittoOnPort(t, loopback.FreePort(t), o)
}

// StartMosquittoOnPort is StartMosquitto on a given port.
func StartMosquittoOnPort(t testing.TB, port int, o Options) *Mosquitto {
	t.Helper()
	m := &Mosquitto{t: t, bin: Binary(t, "mosquitto"), Dir: t.TempDir(), Port: port, tls: o.TLS != nil}
	lines := []string{
		fmt.Sprintf("listener %d 127.0.0.1", m.Port),
		"max_queued_messages 0",
		"max_inflight_messages 0",
		"log_dest stderr",
		"log_type error",
		"log_type warning",
		"log_type notice",
		"log_type information",
		"connection_messages true",
	}
	switch {
	case o.DynSec != "":
		lines = append(lines, "allow_anonymous false", "plugin "+DynSecPlugin(t), "plugin_opt_config_file "+o.DynSec)
	case o.PasswordFile != "":
		lines = append(lines, "allow_anonymous false", "password_file "+o.PasswordFile)
	default:
		lines = append(lines, "allow_anonymous true")
	}
	if o.NoPersistence {
		lines = append(lines, "persistence false")
	} else {
		lines = append(lines, "persistence true", "persistence_location "+m.Dir+"/",
			"autosave_interval 1", "autosave_on_changes true")
	}
	if o.TLS != nil {
		lines = append(lines, "cafile "+o.TLS.CA, "certfile "+o.TLS.Cert, "keyfile "+o.TLS.Key, "tls_version tlsv1.2")
	}
	lines = append(lines, o.Extra...)
	if o.Config != "" {
		lines = strings.Split(strings.NewReplacer("{{PORT}}", strconv.Itoa(m.Port), "{{DIR}}", m.Dir).Replace(o.Config), "\n")
	}
	if os.Getuid() == 0 {
		lines = append(lines, "user root") // else Mosquitto drops to "mosquitto", who cannot write Dir
	}
	m.conf = filepath.Join(m.Dir, "mosquitto.conf")
	if err := os.WriteFile(m.conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Kill)
	return m
}

// URL is tcp://127.0.0.1:PORT (ssl:// with Options.TLS).
func (m *Mosquitto) URL() string {
	if m.tls {
		return "ssl://127.0.0.1:" + strconv.Itoa(m.Port)
	}
	return "tcp://127.0.0.1:" + strconv.Itoa(m.Port)
}

// Start runs the broker (again) and waits until it accepts connections.
func (m *Mosquitto) Start() {
	m.t.Helper()
	cmd := exec.Command(m.bin, "-c", m.conf)
	m.mu.Lock()
	cmd.Stdout = &lockedWriter{m: &m.mu, b: &m.log}
	cmd.Stderr = cmd.Stdout
	m.mu.Unlock()
	if err := cmd.Start(); err != nil {
		m.t.Fatalf("mosquitto: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	m.mu.Lock()
	m.cmd, m.done = cmd, done
	m.mu.Unlock()
	if err := wait.Poll(10*time.Second, func() error {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(m.Port), time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			m.t.Fatalf("mosquitto exited at start:\n%s", m.Logs())
		default:
		}
		return err
	}); err != nil {
		m.t.Fatalf("mosquitto does not listen on %d:\n%s", m.Port, m.Logs())
	}
}

// PID returns the process id of the running broker, 0 when it is not
// running.
func (m *Mosquitto) PID() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd == nil || m.cmd.Process == nil {
		return 0
	}
	return m.cmd.Process.Pid
}

// Kill SIGKILLs the broker and waits for it to exit.
func (m *Mosquitto) Kill() { m.signal(syscall.SIGKILL) }

// Stop SIGTERMs the broker (it saves its persistence file) and waits.
func (m *Mosquitto) Stop() { m.signal(syscall.SIGTERM) }

func (m *Mosquitto) signal(sig syscall.Signal) {
	m.mu.Lock()
	cmd, done := m.cmd, m.done
	m.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(sig)
	<-done
}

// Logs returns what the broker logged.
func (m *Mosquitto) Logs() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.log.String()
}

type lockedWriter struct {
	m *sync.Mutex
	b *bytes.Buffer
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.m.Lock()
	defer w.m.Unlock()
	return w.b.Write(p)
}

// DynSecPlugin returns the path of Mosquitto's dynamic security plugin
// (Debian's mosquitto package ships it under /usr/lib/<triplet>/).
func DynSecPlugin(t testing.TB) string {
	t.Helper()
	const name = "mosquitto_dynamic_security.so"
	var candidates []string
	for _, pattern := range []string{"/usr/lib/*/" + name, "/usr/lib/" + name, "/usr/lib/*/mosquitto/" + name,
		"/usr/local/lib/" + name, "/usr/lib64/" + name, "/opt/homebrew/lib/" + name} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	if len(candidates) > 0 {
		return candidates[0]
	}
	if os.Getenv("OPENSTARRY_SKIP_MOSQUITTO") == "1" {
		t.Skipf("%s is not installed and OPENSTARRY_SKIP_MOSQUITTO=1", name)
	}
	t.Fatalf("%s not found (apt-get install mosquitto); set OPENSTARRY_SKIP_MOSQUITTO=1 to skip this test", name)
	return ""
}

// InitDynSec writes a dynamic security configuration with one admin
// client (mosquitto_ctrl dynsec init) in dir and returns its path.
func InitDynSec(t testing.TB, dir, admin, password string) string {
	t.Helper()
	path := filepath.Join(dir, "dynsec.json")
	out, err := exec.Command(Binary(t, "mosquitto_ctrl"), "dynsec", "init", path, admin, password).CombinedOutput()
	if err != nil {
		t.Fatalf("mosquitto_ctrl dynsec init: %v\n%s", err, out)
	}
	return path
}

// PasswordFile makes a Mosquitto password file with mosquitto_passwd and
// returns its path.
func PasswordFile(t testing.TB, dir string, users map[string]string) string {
	t.Helper()
	bin := Binary(t, "mosquitto_passwd")
	path := filepath.Join(dir, "passwd")
	first := true
	for u, p := range users {
		args := []string{"-b", path, u, p}
		if first {
			args = append([]string{"-c"}, args...)
			first = false
		}
		if out, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
			t.Fatalf("mosquitto_passwd: %v\n%s", err, out)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Message is one message a Collector received.
type Message struct {
	Topic    string
	Payload  []byte
	Retained bool
	At       time.Time // when the collector received it
}

// Collector is an MQTT client that records every message on its
// subscriptions (QoS 1), subscribing again after each reconnection.
type Collector struct {
	Client paho.Client

	mu   sync.Mutex // guards msgs
	msgs []Message
}

// Collect connects a collector to url; clean false gives it a persistent
// session under clientID.
func Collect(t testing.TB, url, clientID string, clean bool, filters ...string) *Collector {
	t.Helper()
	return CollectAs(t, url, clientID, "", "", clean, filters...)
}

// CollectAs is Collect logged in as user (no user name when user is "").
func CollectAs(t testing.TB, url, clientID, user, password string, clean bool, filters ...string) *Collector {
	t.Helper()
	c := &Collector{}
	subs := map[string]byte{}
	for _, f := range filters {
		subs[f] = 1
	}
	subscribed := make(chan error, 1)
	o := paho.NewClientOptions().AddBroker(url).SetClientID(clientID).SetCleanSession(clean).
		SetProtocolVersion(4).SetAutoReconnect(true).SetMaxReconnectInterval(time.Second).
		SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond).SetOrderMatters(true).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			c.mu.Lock()
			c.msgs = append(c.msgs, Message{Topic: m.Topic(), Payload: append([]byte(nil), m.Payload()...), Retained: m.Retained(), At: time.Now()})
			c.mu.Unlock()
		}).
		SetOnConnectHandler(func(pc paho.Client) {
			tok := pc.SubscribeMultiple(subs, nil)
			tok.Wait()
			select {
			case subscribed <- tok.Error():
			default:
			}
		})
	if user != "" {
		o.SetUsername(user).SetPassword(password)
	}
	c.Client = paho.NewClient(o)
	c.Client.Connect()
	select {
	case err := <-subscribed:
		if err != nil {
			t.Fatalf("collector subscribe: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("collector did not connect to %s", url)
	}
	t.Cleanup(func() { c.Client.Disconnect(50) })
	return c
}

// MessagesFrom returns the messages that arrived after the first i.
func (c *Collector) MessagesFrom(i int) []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	if i >= len(c.msgs) {
		return nil
	}
	return append([]Message(nil), c.msgs[i:]...)
}

// Messages returns what arrived on topics matching filter ("" for all).
func (c *Collector) Messages(filter string) []Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Message
	for _, m := range c.msgs {
		if filter == "" || Match(filter, m.Topic) {
			out = append(out, m)
		}
	}
	return out
}

// Match reports whether topic matches an MQTT filter.
func Match(filter, topic string) bool {
	f := strings.Split(filter, "/")
	tp := strings.Split(topic, "/")
	for i, p := range f {
		if p == "#" {
			return true
		}
		if i >= len(tp) || (p != "+" && p != tp[i]) {
			return false
		}
	}
	return len(f) == len(tp)
}

// Publish publishes one QoS 1 message and waits for its PUBACK.
func Publish(t testing.TB, pc paho.Client, topic string, payload []byte) {
	t.Helper()
	tok := pc.Publish(topic, 1, false, payload)
	if !tok.WaitTimeout(10 * time.Second) {
		t.Fatalf("publish to %s: no PUBACK in 10s", topic)
	}
	if err := tok.Error(); err != nil {
		t.Fatalf("publish to %s: %v", topic, err)
	}
}

// ReadPacket reads one MQTT control packet whole, fixed header included,
// for tests that stand between a client and a broker.
func ReadPacket(r *bufio.Reader) ([]byte, error) {
	first, err := r.ReadByte()
	if err != nil {
		return nil, err
	}
	pk := []byte{first}
	n, mul := 0, 1
	for {
		b, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		pk = append(pk, b)
		n += int(b&0x7f) * mul
		if b&0x80 == 0 {
			break
		}
		mul *= 128
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	return append(pk, body...), nil
}
