package fleet

import (
	"encoding/json"
	"time"
)

// UpdateTopic is where a device retains the outcome of its last update.
func UpdateTopic(prefix, device string) string { return prefix + "/" + device + "/update" }

// Outcome is the end of an update, published retained on UpdateTopic and,
// when the hub's update command asked for it, as a second reply to that
// command (same id) on its reply topic.
type Outcome struct {
	ID      string    `json:"id,omitempty"` // the update command's id
	Device  string    `json:"device"`
	State   string    `json:"state"` // committed, rolled_back, aborted
	From    string    `json:"from"`
	To      string    `json:"to"`
	Running string    `json:"running"` // the version that runs now
	Boots   int       `json:"boots"`
	Reason  string    `json:"reason,omitempty"`
	Time    time.Time `json:"time"`
}

// Outcome states.
const (
	UpdateCommitted  = "committed"
	UpdateRolledBack = "rolled_back"
	UpdateAborted    = "aborted"
)

// OutcomeReply is the reply carrying an outcome.
func OutcomeReply(o Outcome) Reply {
	res, _ := json.Marshal(o)
	r := Reply{ID: o.ID, Name: "update", Device: o.Device, OK: o.State == UpdateCommitted, Result: res, Time: o.Time}
	if !r.OK {
		r.Error = "update " + o.State + ": " + o.Reason
	}
	return r
}

// IsOutcome reports whether a reply to an update command is its outcome
// (not the first reply, which says the binary is installed).
func IsOutcome(r Reply) bool {
	var o struct {
		State string `json:"state"`
	}
	_ = json.Unmarshal(r.Result, &o)
	return o.State == UpdateCommitted || o.State == UpdateRolledBack || o.State == UpdateAborted
}
