package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// specs turns templates into what agent processes start from: a template
// resolved by the design layer and frozen to a read-only blueprint
// (agentSpec), and the command line and environment of the process
// (LaunchSpec). It owns nothing that changes: its inputs are the
// configuration, the resolver, the infrastructure plugins' arguments, the
// control API's address and tokens, and the agents' API token.
type specs struct {
	cfg      *config.Config
	data     string // absolute
	runDir   string // blueprints are frozen under runDir/blueprints
	res      Resolver
	infra    *infraSet   // each plugin's AgentArgs
	ctl      *controlAPI // its address and the agent's own token
	apiToken string      // the agents' ports require it (control.EnvAPIToken)
}

// resolveSpec resolves a template and freezes it for agent id (see
// freeze). With wantRole, a template of another role is refused before
// anything is written.
func (s *specs) resolveSpec(ctx context.Context, id, name, requester, wantRole string) (agentSpec, error) {
	if err := agent.ValidateID(id); err != nil {
		return agentSpec{}, err
	}
	res, err := s.res.Resolve(ctx, name)
	if err != nil {
		return agentSpec{}, err
	}
	if wantRole != "" && res.Template.Role != wantRole {
		return agentSpec{}, fmt.Errorf("%w: template %s has role %s, not %s", errRole, name, res.Template.Role, wantRole)
	}
	return s.freeze(id, res, requester)
}

// errRole is wrapped when a template of the wrong role is asked for.
var errRole = errors.New("wrong template role")

// freeze writes the resolved bytes to DATA/run/blueprints/{id}/{name}.json,
// atomically and read-only: the blueprint the agent process reads, which
// never changes under it. The file is named after the template because a
// template file must be.
func (s *specs) freeze(id string, res *design.Resolved, requester string) (agentSpec, error) {
	dir := filepath.Join(s.runDir, "blueprints", id)
	if err := privfs.MkdirAll(dir); err != nil {
		return agentSpec{}, fmt.Errorf("freeze blueprint: %w", err)
	}
	path := filepath.Join(dir, res.Template.Name+".json")
	if err := atomicfile.WriteFile(path, res.Raw, privfs.ReadOnlyMode); err != nil {
		return agentSpec{}, fmt.Errorf("freeze blueprint: %w", err)
	}
	t := res.Template
	typ := t.Type
	if typ == "" {
		typ = t.Name
	}
	spec := agentSpec{Template: t.Name, Type: typ, Version: res.Version, Degraded: res.Degraded, Source: res.Source, Digest: res.Digest, Blueprint: path, Requester: requester,
		Workers: t.Workers, Tools: t.Tools, Storage: t.Storage, MaxTaskBytes: t.Limits.WithDefaults().MaxTaskBytes,
		Ephemeral: t.Ephemeral && t.Role == design.RoleWorker}
	spec.KeepEnv = secretEnvs(t)
	return spec, nil
}

// secretEnvs names the environment variables a template reads its secrets
// from (the model's API key, webhook secrets, the memory engine's key): the
// agent keeps them even when they are OPENSTARRY_* variables.
func secretEnvs(t *design.Template) []string {
	var keep []string
	if t.Brain.APIKeyEnv != "" {
		keep = append(keep, t.Brain.APIKeyEnv)
	}
	for _, l := range t.Listeners {
		if l.SecretEnv != "" {
			keep = append(keep, l.SecretEnv)
		}
	}
	if u, err := url.Parse(t.Memory); err == nil {
		if k := u.Query().Get("api_key_env"); k != "" {
			keep = append(keep, k)
		}
	}
	return keep
}

// launchSpec builds the command line and environment of an agent process:
// `openstarry core` with the frozen blueprint, HTTP on a loopback port the
// kernel picks, JSON logs. The environment is the daemon's without any
// OPENSTARRY_* variable, so that every setting an agent runs with is one the
// daemon decided (flag > env > file > default was resolved here), plus the
// control API's address and the agent's own token.
func (s *specs) launchSpec(id, role string, spec agentSpec) LaunchSpec {
	lvl := strings.ToLower(s.cfg.Log.Level)
	if l, err := zerolog.ParseLevel(lvl); err != nil || l > zerolog.InfoLevel {
		lvl = "info" // readiness is an info line; the daemon filters what it forwards
	}
	args := []string{"core", "--agent", id, "--data", s.data, "--template", spec.Blueprint, "--template-digest", spec.Digest,
		"--template-source", spec.Source, "--listen", "127.0.0.1:0", "--log-level", lvl, "--log-format", "json"}
	if spec.Storage == "" && s.cfg.Store != "" {
		args = append(args, "--store", s.cfg.Store)
	}
	// Always, 0 (no scrub) included: the agent's own default is not the
	// daemon's word.
	args = append(args, "--scrub-interval", s.cfg.ScrubInterval.String())
	env := make([]string, 0, len(os.Environ())+10)
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(strings.ToUpper(k), "OPENSTARRY_") && !slices.Contains(spec.KeepEnv, k) {
			continue
		}
		if k == "GOMAXPROCS" && v == "" {
			continue // the runtime's default, as unset (below)
		}
		env = append(env, kv)
	}
	env = append(env, control.EnvAddr+"="+s.ctl.addr, control.EnvToken+"="+s.ctl.agentToken(id), control.EnvAPIToken+"="+s.apiToken,
		"OPENSTARRY_PARENT_PIPE=1", "OPENSTARRY_LOG_FORMAT=json")
	if os.Getenv("GOMAXPROCS") == "" {
		// An agent runs its Go code on one processor (cmd/openstarry's
		// oneProcessor). In its environment, GOMAXPROCS gives its
		// runtime one processor from the start. When the agent set it
		// itself, its start had run with one processor per core, and
		// what the start allocated stayed resident: the idle master's
		// private memory was 2.5 or 3.1 MiB from one boot to the next
		// (docs/figures.md, "one processor from the start"). The agent
		// takes both variables out of its own environment again
		// (EnvProcs). An operator's GOMAXPROCS in the daemon's
		// environment is passed on instead.
		env = append(env, "GOMAXPROCS=1", control.EnvProcs+"=1")
	}
	for _, inf := range s.infra.list {
		a, e := inf.AgentArgs(id, role)
		args = append(args, a...)
		env = append(env, e...)
	}
	return LaunchSpec{AgentID: id, Args: args, Env: env}
}
