package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

const shipped = "../../configs/openstarry.yaml"

// TestShippedFile: the shipped file loads, holds every key exactly with its
// default, and mentions every key's environment variable.
func TestShippedFile(t *testing.T) {
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(shipped, data)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("shipped file does not validate: %v", err)
	}
	def := Default()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, name := range yamlLeaves("", doc.Content[0]) {
		present[name] = true
	}
	for _, k := range Keys {
		if !present[k.Name] {
			t.Errorf("key %s is not in %s", k.Name, shipped)
		}
		if !strings.Contains(string(data), k.Env) {
			t.Errorf("%s does not name the environment variable %s of %s", shipped, k.Env, k.Name)
		}
		got, _ := c.Get(k.Name)
		want, _ := def.Get(k.Name)
		if got != want {
			t.Errorf("%s: shipped value %q differs from the default %q", k.Name, got, want)
		}
		if k.Doc == "" {
			t.Errorf("%s has no documentation", k.Name)
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"top", "datta: x\n", `line 1: unknown key "datta"`},
		{"nested", "http:\n  lisen: 1\n", `line 2: unknown key "http.lisen" (keys of http: listen, token, hosts, handoff)`},
		{"section as value", "http: 127.0.0.1:1\n", `"http" is a section`},
		{"value as section", "data:\n  x: 1\n", `data: want a single value`},
		{"deep", "supervise:\n  crashloop:\n    restarts: 3\n", `unknown key "supervise.crashloop"`},
		{"list wanted", "design:\n  trusted_keys: abc\n", `design.trusted_keys: want a list`},
		{"bad duration", "supervise:\n  stop_timeout: 10\n", `supervise.stop_timeout: "10" is not a duration`},
		{"bad int", "design:\n  retries: many\n", `design.retries: "many" is not an integer`},
		{"bad bool", "mqtt:\n  disabled: maybe\n", `mqtt.disabled: "maybe" is not true or false`},
		{"not a mapping", "- a\n- b\n", "must be a mapping"},
		{"duplicate", "data: a\ndata: b\n", `"data" already defined`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	_, err := Parse("f.yaml", []byte("nope: 1\n"))
	if !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("errors.Is(ErrUnknownKey) = false: %v", err)
	}
}

func TestEmptyAndNull(t *testing.T) {
	for _, doc := range []string{"", "# only a comment\n", "~\n", "http:\n  listen:\n"} {
		c, err := Parse("f.yaml", []byte(doc))
		if err != nil {
			t.Fatalf("%q: %v", doc, err)
		}
		if c.HTTP.Listen != "127.0.0.1:7777" {
			t.Fatalf("%q: listen %q", doc, c.HTTP.Listen)
		}
	}
}

// TestPrecedence: env over file over default; Set (the flags) over all.
func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "o.yaml")
	doc := "data: /from/file\nstore: bbolt:///file\nsupervise:\n  crashloop_restarts: 2\ndesign:\n  trusted_keys: [a, b]\n"
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"OPENSTARRY_STORE":                      "redis://h:1/0",
		"OPENSTARRY_SUPERVISE_CRASHLOOP_WINDOW": "30s",
		"OPENSTARRY_DESIGN_TRUSTED_KEYS":        "x, y ,",
		"OPENSTARRY_HTTP_LISTEN":                "", // empty: not set
	}
	c, err := Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if c.Data != "/from/file" || c.Store != "redis://h:1/0" || c.Supervise.CrashloopRestarts != 2 ||
		c.Supervise.CrashloopWindow != 30*time.Second || strings.Join(c.Design.TrustedKeys, "|") != "x|y" ||
		c.HTTP.Listen != "127.0.0.1:7777" || c.Supervise.StopTimeout != 10*time.Second {
		t.Fatalf("%+v", c)
	}
	if err := c.Set("data", "/from/flag"); err != nil || c.Data != "/from/flag" {
		t.Fatalf("Set: %v %q", err, c.Data)
	}
	if err := c.Set("nope", "x"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Set unknown: %v", err)
	}
	env["OPENSTARRY_SUPERVISE_STOP_TIMEOUT"] = "soon"
	if _, err := Load(path, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err == nil ||
		!strings.Contains(err.Error(), "OPENSTARRY_SUPERVISE_STOP_TIMEOUT (supervise.stop_timeout)") {
		t.Fatalf("bad env: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml"), nil); err == nil {
		t.Fatal("a missing config file is not an error")
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		key, value, want string
	}{
		{"http.listen", "0.0.0.0:7777", "set http.token"},
		{"http.listen", "nonsense", "not HOST:PORT"},
		{"store", "nope", "not a store URL"},
		{"design.url", "ftp://x", "want http://"},
		{"supervise.crashloop_restarts", "0", "at least 1"},
		{"supervise.stop_timeout", "0s", "must be positive"},
		{"supervise.backoff_max", "1ms", "shorter than"},
		{"master.agent", "../x", "not an agent id"},
		{"master.template", "Master", "not a template name"},
		{"log.level", "loud", "want trace"},
		{"log.format", "xml", "want json"},
		{"mqtt.cert", "c.pem", "need mqtt.broker"},
		{"mqtt.broker_max_packet_bytes", "0", "must be positive"},
		{"mqtt.broker_max_packet_bytes", "268435461", "MQTT's largest packet"},
		{"mqtt.broker_connect_timeout", "0s", "must be positive"},
		{"mqtt.broker_max_connections", "-1", "must be positive"},
		{"mqtt.broker_max_retained_bytes", "0", "must be positive"},
		{"http.token", "a", "at least 16 characters are required, it has 1"},
		{"mqtt.broker_listen", "10.0.0.5:1883", "Listen on 0.0.0.0:1883"},
		{"http.token", "s3cret-s3cret-1", "it has 15"},
	} {
		t.Run(tc.key+"="+tc.value, func(t *testing.T) {
			c := Default()
			if err := c.Set(tc.key, tc.value); err != nil {
				t.Fatal(err)
			}
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), strings.Split(tc.key, "=")[0]) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	c := Default()
	_ = c.Set("http.listen", "0.0.0.0:7777")
	_ = c.Set("http.token", "s3cret-s3cret-16")
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, ok := range [][2]string{{"0.0.0.0:1883", ""}, {"[::]:1883", ""}, {"localhost:1883", ""}, {"[::1]:1883", ""}, {"10.0.0.5:1883", "pi"}} {
		c := Default()
		_ = c.Set("mqtt.broker_listen", ok[0])
		_ = c.Set("mqtt.username", ok[1])
		if err := c.Validate(); err != nil {
			t.Errorf("mqtt.broker_listen %s, user %q: %v", ok[0], ok[1], err)
		}
	}
}

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(shipped); err == nil {
		f.Add(data)
	}
	f.Add([]byte("http:\n  listen: 1\n"))
	f.Add([]byte("a: &x 1\nb: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		_ = c.Validate()
	})
}

// TestConfigurationDocTable: docs/configuration.md documents every key.
func TestConfigurationDocTable(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	pages, _ := filepath.Glob("../../docs/*.md")
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		data = append(data, b...)
	}
	for _, k := range Keys {
		if !strings.Contains(string(data), "| `"+k.Name+"` | `"+k.Env+"` |") {
			t.Errorf("docs/configuration.md has no row for %s (%s)", k.Name, k.Env)
		}
	}
}

// TestShippedFileKeys: every setting of the shipped file is a key of the
// table, and every key of the table is in the file (TestShippedFile checks
// the values).
func TestShippedFileKeys(t *testing.T) {
	data, err := os.ReadFile(shipped)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	inFile := map[string]bool{}
	for _, name := range yamlLeaves("", doc.Content[0]) {
		inFile[name] = true
		if _, ok := Lookup(name); !ok {
			t.Errorf("%s holds %s, which is not a key", shipped, name)
		}
	}
	for _, k := range Keys {
		if !inFile[k.Name] {
			t.Errorf("%s lacks the key %s", shipped, k.Name)
		}
	}
}

// yamlLeaves returns the dotted names of the settings (not the sections)
// of a YAML mapping.
func yamlLeaves(prefix string, n *yaml.Node) []string {
	var out []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := n.Content[i].Value
		if prefix != "" {
			name = prefix + "." + name
		}
		if v := n.Content[i+1]; v.Kind == yaml.MappingNode {
			out = append(out, yamlLeaves(name, v)...)
			continue
		}
		out = append(out, name)
	}
	return out
}
