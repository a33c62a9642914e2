// Package wiring assembles the daemon from its concrete parts: the design
// layer's resolver, the MQTT infrastructure with the fleet's commands and
// telemetry and the self-updater on its connection, the web UI and the
// fleet view on the HTTP listener, and core/daemon's Run that drives them.
// It is the one full wiring of the daemon: `openstarry start` and the
// service run it, and so can a test, in its own process. RunAgent is the
// wiring of one agent process (`openstarry run`, and `core`, the daemon's
// child): host.Run with the HTTP API, its blueprint through the same
// resolver.
//
// The concrete plugins (stores, brains, tools, the embedded broker) are
// registered by the binary's blank imports; a program that runs the wiring
// links them as cmd/openstarry does.
package wiring

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/fleetlink"
	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/updater"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/logx"
	"github.com/openstarry/openstarry-edge/core/tool"
	"github.com/openstarry/openstarry-edge/core/update"
	"github.com/openstarry/openstarry-edge/transport/enroll"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/webui"
)

// Options are what the daemon runs with.
type Options struct {
	Config *config.Config // loaded and validated; Data absolute
	// Log is the daemon's log; ChildLog receives its agents' lines (and,
	// with the daemon's own, feeds the hub's logs.tail).
	Log      zerolog.Logger
	ChildLog io.Writer
	// Self is the running binary (`version --json`): its version and
	// commit are the daemon's, and the updater compares candidates with it.
	Self update.Info
	// Trial says this process is a new version on trial under the update
	// guard (updater.Boot).
	Trial bool
	// Executable is the openstarry binary the agents run (`openstarry
	// core`); empty, this process's own (a test that runs the daemon in
	// its process names a built binary).
	Executable string
}

// RunDaemon wires the concrete pieces into daemon.Run: the design layer
// resolver, the MQTT infrastructure (with the fleet's commands and
// telemetry riding on its connection), and the web UI on the HTTP
// listener; it returns when ctx ends or the daemon stops. Another daemon
// on the data directory is an error with exit code 3 (exitcode.Locked); a
// daemon stopped to run an installed update restarts into it (the process
// is replaced, or its guard told).
func RunDaemon(ctx context.Context, o Options) error {
	cfg, log, childLog := o.Config, o.Log, o.ChildLog
	version, commit := o.Self.Version, o.Self.Commit
	res, err := TemplateResolver(cfg.Design, cfg.Data, log)
	if err != nil {
		return err
	}
	// The last log lines, the daemon's and its agents', for the hub's
	// logs.tail command.
	ring := logx.NewRing(fleet.MaxTailLines)
	childLog = io.MultiWriter(childLog, ring)
	log = log.Output(childLog)
	if err := applyEnrollment(cfg); err != nil {
		return err
	}
	upd, ctx, err := updater.NewDaemon(ctx, cfg, o.Self, o.Trial, log)
	if err != nil {
		return err
	}
	upd.WatchStaged(ctx)
	mi, err := mqtt.NewInfra(mqtt.InfraOptions{Config: cfg.MQTT, DataDir: cfg.Data, Version: version, Log: log})
	if err != nil {
		return err
	}
	if !mi.Disabled() {
		keys, err := updater.TrustedKeys(cfg)
		if err != nil {
			return err
		}
		fl, err := fleetlink.New(cfg, fleetlink.NewOps(cfg, ring, upd, version), mi, keys, log)
		if err != nil {
			return err
		}
		mi.Attach(fl)
	}
	ui, err := webui.New(webui.Options{Token: cfg.HTTP.Token, Log: log})
	if err != nil {
		return err
	}
	log.Info().Str("data", cfg.Data).Str("version", version).Msg("openstarry daemon starting")
	err = daemon.Run(ctx, daemon.Options{
		Config:       cfg,
		Resolver:     res,
		Infra:        []daemon.Infrastructure{daemonInfra{mi}},
		Sessions:     daemonSessions(),
		Version:      version,
		Revision:     commit,
		Log:          log,
		ChildLog:     childLog,
		OnAgentState: mi.PublishState,
		Executable:   o.Executable,
		Web:          func(api http.Handler) http.Handler { return ui.Wrap(fleet.Web(fleetWebOptions(cfg, log), api)) },
	})
	if errors.Is(err, daemon.ErrRunning) {
		return exitcode.New(exitcode.Locked, err)
	}
	if err == nil && upd.RestartPending() {
		return upd.Restart()
	}
	return err
}

// daemonSessions hands the daemon session continuity: the plugin
// sessions.daemon (transport/sessionapi) over the store sessionstore.sqlite
// (storage/sessionsql) and its JSON backup sessionbackup.files
// (storage/sessionfiles), all blank imports of the binary's
// plugins_sqlite.go, or why there is none (a build with -tags nosqlite).
func daemonSessions() daemon.Sessions {
	link, missing := daemon.LookupSessions("sqlite")
	return daemon.Sessions{Link: link, Missing: missing}
}

// fleetWebOptions: the web UI's fleet view reads the hub the daemon is
// configured with, with its credentials; without a hub it has none.
func fleetWebOptions(cfg *config.Config, log zerolog.Logger) fleet.WebOptions {
	m := cfg.MQTT
	o := fleet.WebOptions{Prefix: m.TopicPrefix, Token: cfg.HTTP.Token, Log: log.With().Str("component", "fleet view").Logger()}
	if !m.Disabled && m.Broker != "" {
		o.Dial = mqtt.DialOptions{Broker: m.Broker, Username: m.Username, Password: m.Password, CAFile: m.CA, CertFile: m.Cert, KeyFile: m.Key}
	}
	return o
}

// daemonInfra hands the MQTT infrastructure to the daemon with its status.
type daemonInfra struct{ *mqtt.Infra }

func (d daemonInfra) Status() daemon.InfraStatus { return daemon.InfraStatus(d.Infra.Status()) }

// TemplateValidator is the one place the binary builds its template
// Validator: the tool registry (every tool the binary links) names the
// known tools.
func TemplateValidator() design.Validator {
	return design.Validator{KnownTool: tool.Known, ToolDefinition: func(name string) (design.ModelTool, bool) {
		t, err := tool.Lookup(name)
		if err != nil {
			return design.ModelTool{}, false
		}
		return design.ModelTool{Name: t.Name, Description: t.Description, Parameters: t.Parameters}, true
	}}
}

// TemplateResolver builds the resolver of the design.* settings for a data
// directory: a remote design layer (with its cache under the data
// directory), else the local template directory (default DATA/templates),
// else the shipped templates.
func TemplateResolver(d config.Design, dataDir string, log zerolog.Logger) (*design.Resolver, error) {
	v := TemplateValidator()
	var fetcher *design.Fetcher
	if d.URL != "" {
		var keys []ed25519.PublicKey
		for _, k := range d.TrustedKeys {
			key, err := design.ParseTrustedKey(k)
			if err != nil {
				return nil, fmt.Errorf("trusted key %q: %w", k, err)
			}
			keys = append(keys, key)
		}
		retries := d.Retries
		if retries == 0 {
			retries = -1
		}
		var err error
		fetcher, err = design.NewFetcher(design.Options{
			URL: d.URL, CacheDir: filepath.Join(dataDir, "templates-cache"), Timeout: d.Timeout,
			Retries: retries, TrustedKeys: keys, AllowUnsignedCommands: d.AllowUnsignedCommands, Validator: v, Logger: log,
		})
		if err != nil {
			return nil, err
		}
	}
	dir := d.Templates
	if dir == "" {
		dir = filepath.Join(dataDir, "templates")
	}
	return design.NewResolver(design.ResolverOptions{Fetcher: fetcher, Dir: dir, Embedded: design.Shipped(), Validator: v}), nil
}

// ResolveTemplate finds and validates the blueprint an agent starts with.
func ResolveTemplate(ctx context.Context, d config.Design, nameOrFile, dataDir string, log zerolog.Logger) (*design.Resolved, error) {
	r, err := TemplateResolver(d, dataDir, log)
	if err != nil {
		return nil, err
	}
	res, err := r.Resolve(ctx, nameOrFile)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", nameOrFile, err)
	}
	return res, nil
}

// applyEnrollment fills the mqtt.* keys the configuration leaves empty
// with the credentials openstarry enroll stored.
func applyEnrollment(cfg *config.Config) error {
	c, err := enroll.ReadCredentials(enroll.Dir(cfg.Data))
	if err != nil || c == nil {
		return err
	}
	if cfg.MQTT.Broker == "" {
		cfg.MQTT.Broker = c.Broker
	}
	if cfg.MQTT.Device == "" {
		cfg.MQTT.Device = c.Device
	}
	if cfg.MQTT.Username == "" {
		cfg.MQTT.Username, cfg.MQTT.Password = c.Username, c.Password
	}
	return nil
}

// Interface guards.
var (
	_ daemon.Infrastructure = daemonInfra{}
	_ daemon.StatusReporter = daemonInfra{}
)
