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
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// An agent's spec: its template resolved and frozen to a read-only
// blueprint, and the command line and environment of its process.

// resolveSpec resolves a template and freezes it for agent id (see
// freeze). With wantRole, a template of another role is refused before
// anything is written.
func (d *Daemon) resolveSpec(ctx context.Context, id, name, requester, wantRole string) (agentSpec, error) {
	if err := agent.ValidateID(id); err != nil {
		return agentSpec{}, err
	}
	res, err := d.o.Resolver.Resolve(ctx, name)
	if err != nil {
		return agentSpec{}, err
	}
	if wantRole != "" && res.Template.Role != wantRole {
		return agentSpec{}, fmt.Errorf("%w: template %s has role %s, not %s", errRole, name, res.Template.Role, wantRole)
	}
	return d.freeze(id, res, requester)
}

// errRole is wrapped when a template of the wrong role is asked for.
var errRole = errors.New("wrong template role")

// freeze writes the resolved bytes to DATA/run/blueprints/{id}/{name}.json,
// atomically and read-only: the blueprint the agent process reads, which
// never changes under it. The file is named after the template because a
// template file must be.
func (d *Daemon) freeze(id string, res *design.Resolved, requester string) (agentSpec, error) {
	dir := filepath.Join(d.runDir, "blueprints", id)
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
func (d *Daemon) launchSpec(id, role string, spec agentSpec) LaunchSpec {
	lvl := strings.ToLower(d.cfg.Log.Level)
	if l, err := zerolog.ParseLevel(lvl); err != nil || l > zerolog.InfoLevel {
		lvl = "info" // readiness is an info line; the daemon filters what it forwards
	}
	args := []string{"core", "--agent", id, "--data", d.data, "--template", spec.Blueprint, "--template-digest", spec.Digest,
		"--template-source", spec.Source, "--listen", "127.0.0.1:0", "--log-level", lvl, "--log-format", "json"}
	if spec.Storage == "" && d.cfg.Store != "" {
		args = append(args, "--store", d.cfg.Store)
	}
	// Always, 0 (no scrub) included: the agent's own default is not the
	// daemon's word.
	args = append(args, "--scrub-interval", d.cfg.ScrubInterval.String())
	env := make([]string, 0, len(os.Environ())+8)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(strings.ToUpper(k), "OPENSTARRY_") && !slices.Contains(spec.KeepEnv, k) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, control.EnvAddr+"="+d.ctrlAddr, control.EnvToken+"="+d.agentToken(id), control.EnvAPIToken+"="+d.apiToken,
		"OPENSTARRY_PARENT_PIPE=1", "OPENSTARRY_LOG_FORMAT=json")
	for _, inf := range d.o.Infra {
		a, e := inf.AgentArgs(id, role)
		args = append(args, a...)
		env = append(env, e...)
	}
	return LaunchSpec{AgentID: id, Args: args, Env: env}
}
