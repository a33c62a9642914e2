package session

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestIDs(t *testing.T) {
	now := time.Date(2024, 1, 15, 14, 30, 0, 0, time.UTC)
	p := NewProjectID(now)
	if !strings.HasPrefix(p, "proj_20240115_") || ValidateProjectID(p) != nil {
		t.Fatalf("project id %q", p)
	}
	s := NewSessionID(now)
	if !strings.HasPrefix(s, "sess_20240115143000_") || ValidateSessionID(s) != nil {
		t.Fatalf("session id %q", s)
	}
	if NewProjectID(now) == p || NewSessionID(now) == s {
		t.Fatal("two ids alike: the random part is not random")
	}
	id, err := PlanTaskID(1, "concept", 1)
	if err != nil || id != "task_p1_concept_001" {
		t.Fatalf("task id %q %v", id, err)
	}
	for _, tc := range []struct {
		phase int
		typ   string
		seq   int
	}{{-1, "a", 1}, {1000, "a", 1}, {1, "", 1}, {1, "Code", 1}, {1, "a_b", 1}, {1, "a", 0}, {1, "a", 1000}} {
		if _, err := PlanTaskID(tc.phase, tc.typ, tc.seq); !errors.Is(err, ErrBadID) {
			t.Errorf("PlanTaskID(%d, %q, %d): %v", tc.phase, tc.typ, tc.seq, err)
		}
	}
}

func TestValidateIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(string) error
		id   string
		ok   bool
	}{
		{"project seed example", ValidateProjectID, "proj_20240115_a1b2c3", true},
		{"project bad date", ValidateProjectID, "proj_20241315_a1b2c3", false},
		{"project upper case", ValidateProjectID, "proj_20240115_A1B2C3", false},
		{"project short random", ValidateProjectID, "proj_20240115_a1b2c", false},
		{"project traversal", ValidateProjectID, "../../etc", false},
		{"project empty", ValidateProjectID, "", false},
		{"project trailing", ValidateProjectID, "proj_20240115_a1b2c3/x", false},
		{"session seed example", ValidateSessionID, "sess_20240115143000_x1y2z3", true},
		{"session bad hour", ValidateSessionID, "sess_20240115253000_x1y2z3", false},
		{"session as project", ValidateSessionID, "proj_20240115_a1b2c3", false},
		{"session newline", ValidateSessionID, "sess_20240115143000_x1y2z3\n", false},
		{"task seed example", ValidatePlanTaskID, "task_p1_concept_001", true},
		{"task seq 000", ValidatePlanTaskID, "task_p1_concept_000", false},
		{"task two digits", ValidatePlanTaskID, "task_p1_concept_01", false},
		{"task no phase", ValidatePlanTaskID, "task_concept_001", false},
		{"task revision suffix", ValidatePlanTaskID, "task_p1_concept_001.r1", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.fn(tc.id)
			if (err == nil) != tc.ok {
				t.Fatalf("%q: %v", tc.id, err)
			}
			if err != nil && !errors.Is(err, ErrBadID) {
				t.Fatalf("%q: %v does not wrap ErrBadID", tc.id, err)
			}
		})
	}
}

func TestAgentTaskID(t *testing.T) {
	const p, sid = "proj_20240115_a1b2c3", "sess_20240115143000_x1y2z3"
	got := AgentTaskID(p, sid, "task_p1_a_001", 2)
	if got != "plan:proj_20240115_a1b2c3:sess_20240115143000_x1y2z3:task_p1_a_001:2" {
		t.Fatalf("AgentTaskID = %s", got)
	}
	gp, gs, gt, ga, ok := ParseAgentTaskID(got)
	if !ok || gp != p || gs != sid || gt != "task_p1_a_001" || ga != 2 || PlanTaskOf(got) != "task_p1_a_001" {
		t.Fatalf("ParseAgentTaskID(%s) = %s %s %s %d %v", got, gp, gs, gt, ga, ok)
	}
	// The longest plan task id fits an agent's task id limit (128 bytes).
	long := AgentTaskID(p, sid, "task_p999_"+strings.Repeat("x", 32)+"_999", 999)
	if len(long) > 128 {
		t.Fatalf("%d bytes: %s", len(long), long)
	}
	for _, bad := range []string{"plan:", "plan:x:y:z:1", "plan:" + p + ":" + sid + ":task_p1_a_001:01",
		"plan:" + p + ":" + sid + ":task_p1_a_001:-1", "plan:" + p + ":" + sid + ":task_p1_a_001", "task_p1_a_001"} {
		if _, _, _, _, ok := ParseAgentTaskID(bad); ok {
			t.Errorf("ParseAgentTaskID(%q) accepted", bad)
		}
	}
	// The form of older versions.
	for _, tc := range []struct{ id, plan string }{{"task_p1_a_001", "task_p1_a_001"}, {"task_p1_a_001.r2", "task_p1_a_001"}} {
		if PlanTaskOf(tc.id) != tc.plan {
			t.Errorf("PlanTaskOf(%s) = %s", tc.id, PlanTaskOf(tc.id))
		}
	}
}
