package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon"
	"github.com/openstarry/openstarry-edge/core/logx"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
	"github.com/openstarry/openstarry-edge/transport/webui"
)

// configFlags locate the configuration: every daemon-side command has them.
type configFlags struct {
	config string
	data   string
}

func (f *configFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", envOr("OPENSTARRY_CONFIG", ""), "configuration file (YAML; every key in configs/openstarry.yaml) (env OPENSTARRY_CONFIG)")
	fl.StringVar(&f.data, "data", "", "data directory; wins over the file's data and OPENSTARRY_DATA (default ./data)")
}

// load reads the configuration with the precedence flag > env > file >
// default, and validates it.
func (f *configFlags) load(cmd *cobra.Command) (*config.Config, error) {
	cfg, err := config.Load(f.config, nil)
	if err != nil {
		return nil, err
	}
	if cmd.Flags().Changed("data") {
		if err := cfg.Set("data", f.data); err != nil {
			return nil, err
		}
	}
	if cmd.Flags().Changed("log-level") {
		_ = cfg.Set("log.level", global.logLevel)
	}
	if cmd.Flags().Changed("log-format") {
		_ = cfg.Set("log.format", global.logFormat)
	}
	if err := cfg.Validate(); err != nil {
		where := "configuration"
		if f.config != "" {
			where = "configuration " + f.config
		}
		return nil, fmt.Errorf("%s:\n%w", where, err)
	}
	abs, err := filepath.Abs(cfg.Data)
	if err != nil {
		return nil, err
	}
	cfg.Data = abs
	global.logLevel, global.logFormat = cfg.Log.Level, cfg.Log.Format
	return cfg, nil
}

func init() {
	var f configFlags
	var check bool
	cmd := &cobra.Command{
		Use:   "start [--config FILE] [--data DIR] [--check]",
		Short: "Run the daemon in the foreground (what the service runs)",
		Long: `Run the Orchestrator daemon: boot in four phases (infrastructure, design layer,
master agent, workers on demand), run one process per agent, restart crashed
ones with backoff, and serve the control API (openstarry status, openstarry
agent) and the HTTP listener (the web UI at /, /healthz, /metrics,
/agents/{id}/...).

With --check it only loads and checks the configuration, prints
"configuration FILE is valid" or what is wrong, and exits 0 or 1 (the
image's first boot checks the boot partition's openstarry.yaml so).

Exit status: 0 after SIGTERM or SIGINT, 3 when another daemon runs on the data
directory, 1 on any other error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			survivePipeClose()
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			if check {
				name := f.config
				if name == "" {
					name = "(defaults and environment)"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "configuration %s is valid\n", name)
				return nil
			}
			if handled, err := updateBoot(cfg); handled {
				return err
			}
			if bootFault != nil {
				bootFault()
			}
			if !interactive() {
				return runService(cfg)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runDaemon(ctx, cfg, logger())
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&check, "check", false, "load and check the configuration, then exit")
	rootCmd.AddCommand(cmd)
}

// runDaemon runs the daemon with its log, and its agents', on stderr in the
// format of --log-format.
func runDaemon(ctx context.Context, cfg *config.Config, log zerolog.Logger) error {
	return runDaemonTo(ctx, cfg, log, logx.Writer(os.Stderr, global.logFormat))
}

// runDaemonTo wires the concrete pieces into daemon.Run: the design layer
// resolver, the MQTT infrastructure (with the fleet's commands and
// telemetry riding on its connection), and the web UI on the HTTP
// listener. The agents' log lines go to childLog.
func runDaemonTo(ctx context.Context, cfg *config.Config, log zerolog.Logger, childLog io.Writer) error {
	res, err := templateResolver(cfg.Design, cfg.Data)
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
	upd, ctx, err := newDaemonUpdater(ctx, cfg, log)
	if err != nil {
		return err
	}
	upd.watchStaged(ctx)
	mi, err := mqtt.NewInfra(mqtt.InfraOptions{Config: cfg.MQTT, DataDir: cfg.Data, Version: version, Log: log})
	if err != nil {
		return err
	}
	if !mi.Disabled() {
		fl, err := newFleetLink(cfg, fleetOps{cfg: cfg, ring: ring, upd: upd}, mi, log)
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
		Version:      version,
		Revision:     commit,
		Log:          log,
		ChildLog:     childLog,
		OnAgentState: mi.PublishState,
		Web:          func(api http.Handler) http.Handler { return ui.Wrap(fleet.Web(fleetWebOptions(cfg, log), api)) },
	})
	if errors.Is(err, daemon.ErrRunning) {
		return exitCode(exitLocked, err)
	}
	if err == nil && upd.restartPending() {
		return upd.restart()
	}
	return err
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

// fleetLink puts the hub's signed commands, the device's telemetry and the
// last update's outcome on the daemon's MQTT connection.
type fleetLink struct {
	dev            *fleet.Device
	rep            *fleet.Reporter
	upd            *daemonUpdater
	prefix, device string
}

func newFleetLink(cfg *config.Config, ops fleetOps, mi *mqtt.Infra, log zerolog.Logger) (fleetLink, error) {
	keys, err := trustedFleetKeys(cfg)
	if err != nil {
		return fleetLink{}, err
	}
	nonces, err := fleet.OpenNonces(fleetNoncesPath(cfg))
	if err != nil {
		return fleetLink{}, err
	}
	prefix, device := cfg.MQTT.TopicPrefix, mi.Device()
	return fleetLink{
		upd: ops.upd, prefix: prefix, device: device,
		dev: fleet.NewDevice(fleet.DeviceConfig{Prefix: prefix, Device: device, Trusted: keys,
			Nonces: nonces, Ops: ops, Log: log.With().Str("component", "fleet").Logger()}),
		rep: fleet.NewReporter(prefix, device, cfg.MQTT.TelemetryInterval,
			ops.telemetry(device, time.Now(), func() map[string]int64 {
				return map[string]int64{"mqtt_reconnects": mi.Reconnects()}
			})),
	}, nil
}

func (l fleetLink) Attach(c paho.Client) {
	l.dev.Subscribe(c)
	l.rep.Attach(c)
	l.upd.Attach(c, l.prefix, l.device)
}
func (l fleetLink) Run(ctx context.Context) { l.rep.Run(ctx) }
func (l fleetLink) Changed()                { l.rep.Poke() }
func (l fleetLink) Wait()                   { l.dev.Wait() }

// Interface guards.
var (
	_ daemon.Infrastructure = daemonInfra{}
	_ daemon.StatusReporter = daemonInfra{}
	_ mqtt.Attachment       = fleetLink{}
)
