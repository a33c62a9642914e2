package brain

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
)

func init() {
	Register("echo", func(design.Brain) (agent.Brain, error) { return Echo{}, nil })
}

// Echo is the deterministic scripted brain for demos, tests and offline
// boards. A task whose input is {"call": [{"tool": NAME, "args": {...}}, ...]}
// runs those tools in order, like a model's tool calls, and is answered with
// their results; any other input is answered with itself.
type Echo struct{}

// Script is the echo brain's tool-call input.
type Script struct {
	Call []agent.Call `json:"call"`
}

// Quick implements agent.Quick: the echo brain answers from the task's
// input alone.
func (Echo) Quick() bool { return true }

// Think implements agent.Brain.
func (Echo) Think(_ context.Context, turn agent.Turn) (agent.Reply, error) {
	script, isScript, err := parseScript(turn.Task.Input)
	if err != nil {
		return agent.Reply{}, err
	}
	if !isScript {
		return agent.Reply{Output: turn.Task.Input}, nil
	}
	if turn.Step == 0 && len(script.Call) > 0 {
		return agent.Reply{Calls: script.Call}, nil
	}
	results := turn.Results
	if results == nil {
		results = []agent.ToolResult{}
	}
	out, err := json.Marshal(results)
	if err != nil {
		return agent.Reply{}, err
	}
	return agent.Reply{Output: out}, nil
}

// parseScript recognises {"call": [...]} inputs.
func parseScript(input json.RawMessage) (Script, bool, error) {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return Script{}, false, nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &probe); err != nil {
		return Script{}, false, nil
	}
	if _, ok := probe["call"]; !ok {
		return Script{}, false, nil
	}
	var s Script
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return Script{}, true, fmt.Errorf("echo: bad call list: %v", err)
	}
	for i, c := range s.Call {
		if c.Tool == "" {
			return Script{}, true, fmt.Errorf("echo: call %d has no tool", i)
		}
	}
	return s, true, nil
}

// Interface guards.
var (
	_ agent.Brain = Echo{}
	_ agent.Quick = Echo{}
)
