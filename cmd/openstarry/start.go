package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/updater"
	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/wiring"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/logx"
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
	// The global flags (the root's globals) win over the file; the
	// file's, or their defaults, are then what the command logs with.
	fl := cmd.Flags()
	for _, k := range []struct{ flag, key string }{{"log-level", "log.level"}, {"log-format", "log.format"}} {
		if f := fl.Lookup(k.flag); f != nil && f.Changed {
			_ = cfg.Set(k.key, f.Value.String())
		}
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
	// From now on the command logs (globals.logger) as configured.
	for flag, v := range map[string]string{"log-level": cfg.Log.Level, "log-format": cfg.Log.Format} {
		if f := fl.Lookup(flag); f != nil {
			_ = f.Value.Set(v)
		}
	}
	return cfg, nil
}

func newStartCmd(g *globals) *cobra.Command {
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
			oneProcessor()
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
			logQuietSysmon(g.logger())
			self := selfInfo()
			handled, trial, err := updater.Boot(cfg, self, g.logger())
			if handled {
				return err
			}
			bootFault()
			d := wiring.Options{Config: cfg, Self: self, Trial: trial}
			if !interactive() {
				return runService(d)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runDaemon(ctx, d, g.logger())
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&check, "check", false, "load and check the configuration, then exit")
	return cmd
}

// runDaemon runs the daemon (wiring.RunDaemon) with its log, and its
// agents', on stderr in the format of --log-format (log.format).
func runDaemon(ctx context.Context, d wiring.Options, log zerolog.Logger) error {
	d.Log, d.ChildLog = log, logx.Writer(os.Stderr, d.Config.Log.Format)
	return wiring.RunDaemon(ctx, d)
}
