package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/jsonerr"
)

// workers are the agents spawned on demand from boot phase 4 (agent_manager,
// session plans): their spawn, stop and restoration at the next boot, and
// the retirement of ephemeral ones (retire.go). It owns the registry,
// DATA/run/workers.json (registry.go), which records every worker and
// every pending handoff before the daemon acts on it; the handoffs
// themselves are carried by handoffs (handoff.go).
type workers struct {
	cfg      *config.Config
	log      zerolog.Logger
	now      func() time.Time
	data     string // absolute
	boot     *bootState
	super    *supervisor
	specs    *specs
	handoffs *handoffs

	reg      *registry  // opened in boot phase 1
	retireMu sync.Mutex // one ephemeral worker retired at a time
}

// spawn is phase 4's request: resolve the worker template, freeze
// it, record the worker (and its task) durably, then start it and wait for
// the first outcome of the process.
func (w *workers) spawn(ctx context.Context, requester string, req control.AgentRequest) (*control.SpawnResult, error) {
	if w.super.isStopping() {
		return nil, ErrStopping
	}
	if !w.boot.isBooted() {
		return nil, ErrBooting
	}
	if !design.ValidName(req.Template) {
		return nil, badRequest("template %q is not a template name", req.Template)
	}
	var rm *member
	if requester != "" {
		if rm = w.super.member(requester); rm == nil {
			return nil, badRequest("requester %q is not an agent of this daemon", requester)
		}
	}
	if rm == nil && len(req.Task) > 0 {
		return nil, badRequest("a task needs a requester (header %s) to send its result to", control.HeaderAgent)
	}
	if rm != nil {
		// The requester's frozen blueprint decides: it must name the
		// agent_manager tool, and the template among its workers; a
		// template that names no workers may spawn none.
		rs := rm.getSpec()
		if err := mayManage(requester, rs); err != nil {
			return nil, err
		}
		if !slices.Contains(rs.Workers, req.Template) {
			msg := fmt.Sprintf("template %s is not among the workers of %s's template %s: %v", req.Template, requester, rs.Template, rs.Workers)
			if len(rs.Workers) == 0 {
				msg = fmt.Sprintf("%s's template %s names no workers: it may spawn none", requester, rs.Template)
			}
			return nil, refuse(ErrTemplateRefused, "%s", msg)
		}
	}
	id := req.AgentID
	if id == "" {
		id = req.Template + "-" + randomHex(3)
	}
	if err := agent.ValidateID(id); err != nil {
		return nil, badRequest("agent_id: %v", err)
	}
	if m := w.super.member(id); m != nil {
		info := m.info()
		if m.role != control.RoleWorker || info.State != control.StateStopped {
			return nil, refuse(ErrConflict, "agent %s is already running (state %s, pid %d)", id, info.State, info.PID)
		}
		// A stopped worker of the same id is replaced.
		if err := w.super.remove(ctx, m); err != nil {
			return nil, err
		}
	}
	var h *handoff
	if len(req.Task) > 0 && string(req.Task) != "null" {
		task, taskID, err := normaliseTask(req.Task)
		if err != nil {
			return nil, badRequest("task: %v", err)
		}
		h = &handoff{Worker: id, Requester: requester, TaskID: taskID, Task: task}
	}
	spec, err := w.specs.resolveSpec(ctx, id, req.Template, requester, design.RoleWorker)
	if errors.Is(err, errRole) {
		return nil, refuse(ErrTemplateRefused, "%v: only worker templates are spawned on demand", err)
	}
	if err != nil {
		return nil, refuse(ErrTemplate, "template %s: %v", req.Template, err)
	}
	// The id is taken first, so that two spawns of one id cannot both
	// pass; then the worker is durable before anything runs: a daemon
	// crash from here on restores it and resumes the handoff.
	m, err := w.super.reserve(id, control.RoleWorker, spec)
	if err != nil {
		return nil, err
	}
	if err := w.reg.addWorker(regWorker{ID: id, Template: req.Template, Requester: requester, Created: w.now().UTC(), Storage: spec.Storage}, h); err != nil {
		w.super.release(m)
		return nil, err
	}
	go m.run()
	w.log.Info().Str("agent", id).Str("template", req.Template).Str("requester", requester).Str("source", spec.Source).
		Msgf("worker %s spawned on demand", id)
	if h != nil {
		w.handoffs.start(*h)
	}
	w.super.waitFirstOutcome(ctx, m)
	info := m.info()
	out := &control.SpawnResult{AgentID: id, Template: req.Template, PID: info.PID, State: info.State}
	if h != nil {
		out.TaskID = h.TaskID
		out.ResultTaskID = control.ResultTaskID(id, h.TaskID)
	}
	return out, nil
}

// mayManage refuses agent id the control API's agent_manager actions
// unless its frozen blueprint names the agent_manager tool.
func mayManage(id string, spec agentSpec) error {
	if slices.Contains(spec.Tools, control.ToolAgentManager) {
		return nil
	}
	return refuse(ErrForbidden, "agent %s's template %s has no %s tool: it may not spawn, list or stop workers", id, spec.Template, control.ToolAgentManager)
}

// stop stops a worker for good: its process, its supervisor, its
// registry entry. Pending handoffs to it end with a failed result.
func (w *workers) stop(ctx context.Context, id string) (*control.AgentInfo, error) {
	m := w.super.member(id)
	if m == nil {
		return nil, unknownAgent(id)
	}
	if m.role != control.RoleWorker {
		return nil, refuse(ErrNotWorker, "agent %s is the %s; agent_manager stops workers only", id, m.role)
	}
	if err := w.super.remove(ctx, m); err != nil {
		return nil, err
	}
	if err := w.reg.removeWorker(id); err != nil {
		return nil, err
	}
	w.log.Info().Str("agent", id).Msgf("worker %s stopped and removed", id)
	info := m.info()
	return &info, nil
}

// restore starts again the workers the previous run had spawned and
// not stopped, and resumes their handoffs. A worker whose template cannot
// be resolved any more is shown in crashloop with the reason.
func (w *workers) restore(ctx context.Context) int {
	retired := w.finishRetirements(ctx)
	reg := w.reg.snapshot()
	n := 0
	for _, rw := range reg.Workers {
		if rw.Stopped || slices.Contains(retired, rw.ID) || rw.Retiring {
			continue
		}
		spec, err := w.specs.resolveSpec(ctx, rw.ID, rw.Template, rw.Requester, design.RoleWorker)
		if err != nil {
			w.log.Error().Str("agent", rw.ID).Str("template", rw.Template).Err(err).Msg("worker not restored: its template cannot be resolved")
			continue
		}
		if _, err := w.super.add(rw.ID, control.RoleWorker, spec); err != nil {
			w.log.Error().Str("agent", rw.ID).Err(err).Msg("worker not restored")
			continue
		}
		w.log.Info().Str("agent", rw.ID).Str("template", rw.Template).Msg("worker restored")
		n++
	}
	for _, h := range reg.Handoffs {
		w.log.Info().Str("worker", h.Worker).Str("task", h.TaskID).Bool("handed", h.Handed).Msg("resuming a worker handoff")
		w.handoffs.start(h)
	}
	return n
}

// normaliseTask checks a task for a worker and gives it a task_id when it
// has none.
func normaliseTask(raw json.RawMessage) (json.RawMessage, string, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, "", errors.New(jsonerr.Describe("task", err))
	}
	if obj == nil {
		return nil, "", errors.New("not a JSON object")
	}
	if _, ok := obj["task_id"]; !ok {
		id, _ := json.Marshal("t-" + randomHex(8))
		obj["task_id"] = id
	}
	out, err := json.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	t, err := agent.DecodeTask(out, 0)
	if err != nil {
		return nil, "", err
	}
	return out, t.TaskID, nil
}

func badRequest(format string, a ...any) error { return refuse(ErrBadRequest, format, a...) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
