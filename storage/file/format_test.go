package file

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// FuzzDecode feeds decode arbitrary files. It must never panic; a file it
// accepts must hold a valid snapshot, and encoding that snapshot again must
// give a file that decodes to the same contract JSON.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob(filepath.Join("testdata", "*.json"))
	for _, p := range seeds {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	payload, _ := agent.Encode(storagetest.Sample("fuzz", 3))
	good, _ := encode(3, 4, payload)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"checksum":"","generation":1,"snapshot":{"agent_id":"a","tick_index":0,"timestamp":0,"status":"STOPPED","memory":{"short_term_history":[],"working_variables":{}},"event_queue_backup":[]}}`))
	f.Add([]byte(`{"snapshot":null}`))
	f.Add([]byte(`{} {}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := decode(data)
		if err != nil {
			return
		}
		if err := g.snap.Validate(); err != nil {
			t.Fatalf("accepted an invalid snapshot: %v", err)
		}
		p1, err := agent.Encode(g.snap)
		if err != nil {
			t.Fatal(err)
		}
		again, err := encode(g.gen, g.indexedSeq, p1)
		if err != nil {
			t.Fatal(err)
		}
		g2, err := decode(again)
		if err != nil {
			t.Fatalf("re-encoded file does not decode: %v\n%s", err, again)
		}
		p2, _ := agent.Encode(g2.snap)
		if !bytes.Equal(p1, p2) || g2.edited || g2.gen != g.gen {
			t.Fatalf("round trip changed the snapshot:\n%s\n%s", p1, p2)
		}
	})
}

// FuzzDecodeLine feeds decodeLine arbitrary task index lines.
func FuzzDecodeLine(f *testing.F) {
	r := result("fuzz", 7)
	line, _ := encodeLine(&r, 1234)
	f.Add(bytes.TrimSuffix(line, []byte("\n")))
	f.Add([]byte(`{"checksum":"crc32c:00000000","indexed_at":1,"result":{"seq":1}}`))
	f.Add([]byte(`{"result":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, at, err := decodeLine(data)
		if err != nil {
			return
		}
		again, err := encodeLine(r, at)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := decodeLine(bytes.TrimSuffix(again, []byte("\n"))); err != nil {
			t.Fatalf("re-encoded line does not decode: %v", err)
		}
	})
}

func TestTestdata(t *testing.T) {
	for _, tc := range []struct {
		file   string
		edited bool
		err    string
	}{
		{"sample.json", false, ""},
		{"fresh.json", false, ""},
		{"hand-edited.json", true, ""},
		{"bad-comma.json", false, "line 6, column 22"},
	} {
		data, err := os.ReadFile(filepath.Join("testdata", tc.file))
		if err != nil {
			t.Fatal(err)
		}
		g, err := decode(data)
		switch {
		case tc.err != "":
			if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.err)) {
				t.Errorf("%s: %v; want an error at %s", tc.file, err, tc.err)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.file, err)
		case g.edited != tc.edited:
			t.Errorf("%s: edited = %v", tc.file, g.edited)
		}
	}
}
