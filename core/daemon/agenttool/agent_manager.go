// Package agenttool holds the tools that talk to the daemon through its
// control API (core/daemon/control): agent_manager, which spawns, lists and
// stops workers, and the session tools approval_request, approach_record and
// task_update, which record in sessions.db.
//
// They register themselves in the tool registry (core/tool) from init, like
// any other plugin, and the binary picks them by a blank import. The kernel
// (core/agent) runs only the tools its host resolved for it, so it never
// imports this package, the control client or net/http.
//
// Each tool finds its daemon in Env.Services (ServiceAgentManager,
// ServiceSessions); without one it dials the daemon named by
// OPENSTARRY_CONTROL and OPENSTARRY_CONTROL_TOKEN, which the daemon sets in
// the environment of every agent it spawns.
package agenttool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/tool"
)

// ServiceAgentManager is the Env.Services key of the AgentManager.
const ServiceAgentManager = "agent_manager"

// AgentManager is what the agent_manager tool needs of its host: the
// daemon's control API (a *control.Client satisfies it). The host puts it in
// Env.Services[ServiceAgentManager]; without one the tool dials the daemon
// named by OPENSTARRY_CONTROL and OPENSTARRY_CONTROL_TOKEN, which the daemon
// sets in the environment of every agent it spawns.
type AgentManager interface {
	Manage(ctx context.Context, requester string, req control.AgentRequest) (json.RawMessage, error)
}

func init() {
	tool.Register(tool.Tool{
		Name: "agent_manager",
		Description: `Spawn, list or stop worker agents through the daemon. args: {"action": "spawn"|"list"|"stop", ` +
			`"template": worker template name (spawn), "agent_id": optional for spawn, required for stop, ` +
			`"task": optional task JSON handed to the spawned worker}. The worker's result comes back later as a task ` +
			`of type "worker_result". Not idempotent.`,
		Idempotent: false,
		Run:        agentManager,
	})
}

func agentManager(ctx context.Context, env tool.Env, raw json.RawMessage) (json.RawMessage, error) {
	var req control.AgentRequest
	if err := tool.DecodeArgs(raw, &req); err != nil {
		return nil, err
	}
	switch req.Action {
	case control.ActionSpawn:
		if req.Template == "" {
			return nil, errors.New(`spawn needs "template"`)
		}
		if len(req.Task) > 0 && string(req.Task) != "null" {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(req.Task, &obj); err != nil {
				return nil, fmt.Errorf(`"task" must be a task object: %v`, err)
			}
		}
	case control.ActionStop:
		if req.AgentID == "" {
			return nil, errors.New(`stop needs "agent_id"`)
		}
	case control.ActionList:
	default:
		return nil, fmt.Errorf(`action %q: want "spawn", "list" or "stop"`, req.Action)
	}
	m, _ := env.Services[ServiceAgentManager].(AgentManager)
	if m == nil {
		c, err := control.FromEnv()
		if err != nil {
			return nil, err
		}
		defer c.Close()
		m = c
	}
	return m.Manage(ctx, env.AgentID, req)
}

// Interface guard.
var _ AgentManager = (*control.Client)(nil)
