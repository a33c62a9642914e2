package agent

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// jsonEqual compares two JSON documents as values, field for field.
func jsonEqual(t *testing.T, want, got []byte) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want: %v", err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got: %v", err)
	}
	if !reflect.DeepEqual(w, g) {
		t.Fatalf("round trip changed the snapshot\nwant %s\ngot  %s", want, got)
	}
}

// TestGoldenRoundTrip: the specification's example and a snapshot using
// every optional field survive decode → encode field for field.
func TestGoldenRoundTrip(t *testing.T) {
	for _, name := range []string{"seed_002.json", "full_v1.json"} {
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", name))
			if err != nil {
				t.Fatal(err)
			}
			s, err := Decode(raw)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			out, err := Encode(s)
			if err != nil {
				t.Fatal(err)
			}
			jsonEqual(t, raw, out)
			again, err := Decode(out)
			if err != nil {
				t.Fatalf("Decode of encoded: %v", err)
			}
			out2, _ := Encode(again)
			if string(out) != string(out2) {
				t.Fatalf("second round trip differs:\n%s\n%s", out, out2)
			}
		})
	}
}

func TestSeedFields(t *testing.T) {
	raw, _ := os.ReadFile("testdata/seed_002.json")
	s, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	if s.AgentID != "worker_007" || s.TickIndex != 42 || s.Timestamp != 1706582400000 ||
		s.Status != StatusWaitingForEvent || len(s.Memory.ShortTermHistory) != 2 ||
		s.Memory.WorkingVariables["current_file_path"] != "/tmp/report.txt" ||
		len(s.EventQueueBackup) != 1 || s.EventQueueBackup[0].Source != "mcp" ||
		string(s.EventQueueBackup[0].Payload) != `"..."` {
		t.Fatalf("fields not decoded as the specification says: %+v", s)
	}
	// An older snapshot (no schema_version) is version 0 and loads.
	if s.SchemaVersion != 0 {
		t.Fatalf("schema_version = %d, want 0 for a bare contract snapshot", s.SchemaVersion)
	}
}

func TestDecodeRejects(t *testing.T) {
	good, _ := os.ReadFile("testdata/seed_002.json")
	cases := []struct {
		name, data, want string
	}{
		{"not json", `{"agent_id": `, "invalid snapshot"},
		{"unknown field", strings.Replace(string(good), `"tick_index"`, `"tick_idx"`, 1), "unknown field"},
		{"bad status", strings.Replace(string(good), `WAITING_FOR_EVENT`, `DANCING`, 1), "unknown status"},
		{"bad agent id", strings.Replace(string(good), `worker_007`, `../etc`, 1), "agent_id"},
		{"newer schema", strings.Replace(string(good), `"tick_index"`, `"schema_version": 99, "tick_index"`, 1), "newer"},
		{"trailing", string(good) + `{}`, "trailing"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.data))
			if !errors.Is(err, ErrInvalidSnapshot) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode error = %v, want ErrInvalidSnapshot mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCloneIsDeep(t *testing.T) {
	raw, _ := os.ReadFile("testdata/full_v1.json")
	s, err := Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	c := s.Clone()
	c.Memory.WorkingVariables["nested"].(map[string]any)["b"] = false
	c.Outbox[0].Status = "failed"
	c.PendingAction.Tool = "x"
	c.RecentEventIDs[0] = "z"
	out, _ := Encode(s)
	jsonEqual(t, raw, out)
}

func TestValidateID(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"worker_007", true},
		{"master", true},
		{"a.b-c:d", true},
		{strings.Repeat("a", 128), true},
		{"", false},
		{"../x", false},
		{"/etc/passwd", false},
		{"a\x00b", false},
		{strings.Repeat("a", 129), false},
		{".hidden", false},
		{"a/b", false},
		{`a\b`, false},
		{"ünï", false},
	}
	for _, tc := range cases {
		err := ValidateID(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateID(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidID) {
			t.Errorf("ValidateID(%q) error does not wrap ErrInvalidID", tc.id)
		}
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	for _, name := range []string{"seed_002.json", "full_v1.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"agent_id":"a","status":"STOPPED","memory":{"short_term_history":null,"working_variables":null},"event_queue_backup":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Decode(data)
		if err != nil {
			if s != nil {
				t.Fatal("snapshot returned with an error")
			}
			return
		}
		out, err := Encode(s)
		if err != nil {
			t.Fatalf("valid snapshot does not encode: %v", err)
		}
		s2, err := Decode(out)
		if err != nil {
			t.Fatalf("encoded snapshot does not decode: %v\n%s", err, out)
		}
		out2, _ := Encode(s2)
		if string(out) != string(out2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
	})
}

func TestEmptyListsAreNotNull(t *testing.T) {
	for _, s := range []*Snapshot{{AgentID: "a", Status: StatusStopped}, New("a", 1).Clone()} {
		out, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"short_term_history":[]`, `"working_variables":{}`, `"event_queue_backup":[]`} {
			if !strings.Contains(string(out), want) {
				t.Errorf("%s missing from %s", want, out)
			}
		}
	}
}

// TestEncodeIsMarshal: Encode writes what json.Marshal writes, byte for
// byte (it skips only Marshal's second pass over MarshalJSON's output), for
// the golden snapshots, one with text that JSON escapes (HTML, control
// characters, invalid UTF-8) and empty lists, and nil.
func TestEncodeIsMarshal(t *testing.T) {
	snaps := []*Snapshot{nil, {AgentID: "a", Status: StatusStopped, Memory: Memory{WorkingVariables: map[string]any{
		"html": "<b>&amp;</b>", "ctl": "tab\there\nnew\u2028line", "bad": "\xff\xfe", "n": 1.5, "nested": map[string]any{"z": []any{"<", nil}},
	}}}}
	for _, name := range []string{"seed_002.json", "full_v1.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		s, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, s)
	}
	for i, s := range snaps {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("snapshot %d: Encode\n%s\njson.Marshal\n%s", i, got, want)
		}
	}
}
