package session

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func addSeeds(f *testing.F, glob string) {
	files, _ := filepath.Glob(glob)
	for _, p := range files {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"schema_version":"1.0"} {}`))
	f.Add([]byte(`null`))
}

func FuzzDecodeProjectFile(f *testing.F) {
	addSeeds(f, "testdata/project*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if p, err := DecodeProjectFile(data); err == nil && ValidateProjectID(p.ID) != nil {
			t.Fatalf("accepted a bad id %q", p.ID)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	addSeeds(f, "testdata/state_checkpoint*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if c, err := DecodeCheckpoint(data); err == nil && ValidateSessionID(c.SessionID) != nil {
			t.Fatalf("accepted a bad id %q", c.SessionID)
		}
	})
}

func FuzzDecodeApproaches(f *testing.F) {
	addSeeds(f, "testdata/approaches*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		if a, err := DecodeApproaches(data); err == nil {
			for _, list := range [][]Approach{a.Verified, a.Failed, a.Untried} {
				for _, x := range list {
					if validApproachID(x.ID) != nil {
						t.Fatalf("accepted approach id %q", x.ID)
					}
				}
			}
		}
	})
}

func FuzzDecodeRemaining(f *testing.F) {
	addSeeds(f, "testdata/remaining_tasks*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = DecodeRemaining(data)
	})
}

func FuzzDecodeCreateRequest(f *testing.F) {
	addSeeds(f, "testdata/create*.json")
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeCreateRequest(bytes.NewReader(data))
		if err != nil {
			return
		}
		// Whatever was accepted must make a valid plan or a clear error.
		tasks, err := buildPlan("proj_20240115_a1b2c3", "sess_20240115143000_x1y2z3", req.Tasks)
		if err != nil {
			return
		}
		for _, tk := range tasks {
			if ValidatePlanTaskID(tk.ID) != nil {
				t.Fatalf("generated a bad id %q", tk.ID)
			}
		}
		if cyclic(tasks) {
			t.Fatal("accepted a cyclic plan")
		}
	})
}

func FuzzDecodeDecision(f *testing.F) {
	f.Add([]byte(`{"decision":"approve"}`))
	f.Add([]byte(`{"decision":"revise","feedback":"shorter"}`))
	f.Add([]byte(`{"decision":"reject","x":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, st, err := DecodeDecision(bytes.NewReader(data))
		if err == nil && !validApprovalStatus(st) {
			t.Fatalf("status %q", st)
		}
	})
}

func FuzzDecodeToolRequest(f *testing.F) {
	f.Add([]byte(`{"project_id":"proj_20240115_a1b2c3","session_id":"sess_20240115143000_x1y2z3","kind":"failed","approach":{"description":"x"}}`), 0)
	f.Add([]byte(`{"project_id":"proj_20240115_a1b2c3","session_id":"sess_20240115143000_x1y2z3","task_id":"task_p1_a_001","progress_percent":50}`), 1)
	f.Add([]byte(`{"project_id":"proj_20240115_a1b2c3","session_id":"sess_20240115143000_x1y2z3","task_id":"task_p1_a_001","artifacts":["a"]}`), 2)
	f.Add([]byte(`{"project_id":"proj_20240115_a1b2c3","session_id":"sess_20240115143000_x1y2z3","task_id":"task_p1_a_001","tool":"file_append","args":{"line":"x"}}`), 3)
	f.Fuzz(func(t *testing.T, data []byte, kind int) {
		var v any
		switch kind % 4 {
		case 0:
			v = &ApproachRecord{}
		case 1:
			v = &TaskUpdate{}
		case 3, -3:
			v = &UnknownOutcomeRequest{}
		default:
			v = &ApprovalRequest{}
		}
		_ = DecodeToolRequest(data, v)
	})
}

// FuzzParseAgentTaskID: an agent task id parses only into valid ids, and
// what AgentTaskID builds from them parses back the same.
func FuzzParseAgentTaskID(f *testing.F) {
	f.Add("plan:proj_20240115_a1b2c3:sess_20240115143000_x1y2z3:task_p1_a_001:0")
	f.Add("plan:x:y:z:1")
	f.Add("task_p1_a_001.r2")
	f.Fuzz(func(t *testing.T, s string) {
		p, sid, id, n, ok := ParseAgentTaskID(s)
		if !ok {
			return
		}
		if ValidateProjectID(p) != nil || ValidateSessionID(sid) != nil || ValidatePlanTaskID(id) != nil || n < 0 {
			t.Fatalf("%q parsed into %q %q %q %d", s, p, sid, id, n)
		}
		if AgentTaskID(p, sid, id, n) != s || PlanTaskOf(s) != id {
			t.Fatalf("%q does not round-trip", s)
		}
	})
}
