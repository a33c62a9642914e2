package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/kardianos/service"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/wiring"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/logx"
)

// serviceName is the name of the OS service (systemd unit, Windows service).
const serviceName = "openstarry"

// interactive reports whether start runs in a terminal or under a plain
// parent, rather than under the service manager (systemd as its parent,
// the Windows service control manager).
func interactive() bool { return service.Interactive() }

// program adapts the daemon to kardianos/service: Start must not block, so
// it runs the daemon on a goroutine; Stop cancels it and waits, to a
// deadline, for the agents to stop in order. The foreground command and
// the service run the same daemon.Run.
type program struct {
	run      func(ctx context.Context) error
	deadline time.Duration
	log      zerolog.Logger

	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan error
}

func (p *program) Start(service.Service) error {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	p.mu.Lock()
	p.cancel, p.done = cancel, done
	p.mu.Unlock()
	go func() {
		err := p.run(ctx)
		done <- err
		if ctx.Err() == nil {
			// It ended on its own (another daemon holds the data
			// directory, a boot phase failed): exit non-zero so that
			// the service manager restarts it.
			p.log.Error().Err(err).Msg("daemon ended")
			code := 1
			var ee *exitcode.Error
			if errors.As(err, &ee) {
				code = ee.Code
			}
			os.Exit(code)
		}
	}()
	return nil
}

func (p *program) Stop(service.Service) error {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	t := time.NewTimer(p.deadline)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("the daemon did not stop within %s", p.deadline)
	}
}

// runService runs the daemon under the service manager.
func runService(d wiring.Options) error {
	cfg := d.Config
	log, childLog, closeLog := serviceLog(cfg)
	defer closeLog()
	d.Log, d.ChildLog = log, childLog
	prg := &program{
		run: func(ctx context.Context) error { return wiring.RunDaemon(ctx, d) },
		// Agents stop one after the other; each may take stop_timeout.
		deadline: cfg.Supervise.StopTimeout + 20*time.Second,
		log:      log,
	}
	s, err := service.New(prg, serviceConfig("", cfg.Data, ""))
	if err != nil {
		return err
	}
	return s.Run()
}

// serviceConfig describes the service: it runs `openstarry start` with
// absolute --config and --data.
func serviceConfig(configPath, data, user string) *service.Config {
	args := []string{"start"}
	if configPath != "" {
		args = append(args, "--config", configPath)
	}
	args = append(args, "--data", data)
	c := &service.Config{
		Name:        serviceName,
		DisplayName: "OpenStarry Edge",
		Description: "OpenStarry Edge agent appliance daemon: boots the master agent and supervises one process per agent.",
		Arguments:   args,
		UserName:    user,
		Option:      service.KeyValue{},
	}
	platformServiceConfig(c, configPath, data, user)
	return c
}

type serviceFlags struct {
	configFlags
	user   string
	dryRun bool
	init   string
}

func newServiceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "service install|uninstall|start|stop|status",
		Short: "Install and control the OS service (systemd, SysV, Windows) that runs `openstarry start`",
		Args:  cobra.NoArgs,
	}
	var f serviceFlags
	install := &cobra.Command{
		Use:   "install [--config FILE] [--data DIR] [--user NAME]",
		Short: "Install the service; it runs `openstarry start --config FILE --data DIR`",
		Long: `Install the service. On Linux with systemd it writes the hardened unit of
packaging/systemd/openstarry.service (ExecStart, User, Group and ReadWritePaths
set from the flags) to /etc/systemd/system and enables it; start it with
"openstarry service start". On Windows it registers a service that runs as
LocalSystem unless --user is given, restarting on failure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfgPath := ""
			if f.config != "" {
				abs, err := filepath.Abs(f.config)
				if err != nil {
					return err
				}
				if _, err := config.Load(abs, func(string) (string, bool) { return "", false }); err != nil {
					return err
				}
				cfgPath = abs
			}
			data, err := filepath.Abs(f.data)
			if err != nil {
				return err
			}
			note, err := chooseInit(f.init)
			if err != nil {
				return err
			}
			sc := serviceConfig(cfgPath, data, f.user)
			plan := planInstall(sc, data, f.user)
			plan.Note = note
			out := cmd.OutOrStdout()
			if f.dryRun {
				fmt.Fprintln(out, "dry run: nothing is written or created")
				plan.print(out)
				return nil
			}
			if note != "" {
				fmt.Fprintf(out, "note: %s\n", note)
			}
			s, err := service.New(&program{}, sc)
			if err != nil {
				return err
			}
			// A failed install leaves nothing behind: what it made (the
			// data directory, the unit or script) is removed again.
			u := newUndo(plan)
			fail := func(err error) error {
				if uerr := u.run(); uerr != nil {
					return fmt.Errorf("%w; removing what it made: %v", err, uerr)
				}
				return err
			}
			if err := prepareServiceData(data, f.user); err != nil {
				return fail(err)
			}
			if err := service.Control(s, "install"); err != nil {
				return fail(fmt.Errorf("service install (%s): %w", service.Platform(), err))
			}
			fmt.Fprintf(out, "installed service %s (%s): %s\nstart it with: openstarry service start\n",
				serviceName, plan.Manager, plan.Command)
			return nil
		},
	}
	install.Flags().BoolVar(&f.dryRun, "dry-run", false, "print what install would write and create, and do nothing")
	install.Flags().StringVar(&f.init, "init", "auto", "service manager (Linux): auto, systemd or sysv")
	install.Flags().StringVar(&f.config, "config", "", "configuration file the service reads (made absolute)")
	install.Flags().StringVar(&f.data, "data", defaultServiceData(), "data directory of the service (made absolute)")
	install.Flags().StringVar(&f.user, "user", defaultServiceUser(), "user the service runs as (empty: root / LocalSystem)")
	cmd.AddCommand(install)
	for _, action := range []string{"uninstall", "start", "stop"} {
		cmd.AddCommand(&cobra.Command{
			Use:   action,
			Short: action + " the service",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				s, err := service.New(&program{}, serviceConfig("", defaultServiceData(), ""))
				if err != nil {
					return err
				}
				if err := service.Control(s, action); err != nil {
					return fmt.Errorf("service %s (%s): %w", action, service.Platform(), err)
				}
				if action == "uninstall" {
					if err := removeServiceLinks(); err != nil {
						return fmt.Errorf("service uninstall (%s): %w", service.Platform(), err)
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "service %s: %s done\n", serviceName, action)
				return nil
			},
		})
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Print whether the service is installed and running (exit 3 when not running)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := service.New(&program{}, serviceConfig("", defaultServiceData(), ""))
			if err != nil {
				return err
			}
			return printServiceStatus(cmd.OutOrStdout(), s)
		},
	})
	return cmd
}

func printServiceStatus(w io.Writer, s service.Service) error {
	st, err := serviceStatus(s)
	if err != nil && !errors.Is(err, service.ErrNotInstalled) {
		err = fmt.Errorf("service status (%s): %w", service.Platform(), err)
	}
	switch {
	case errors.Is(err, service.ErrNotInstalled):
		fmt.Fprintf(w, "service %s: not installed\n", serviceName)
		return exitCode(exitLocked, errors.New("not installed"))
	case err != nil:
		return err
	case st == service.StatusRunning:
		fmt.Fprintf(w, "service %s: running\n", serviceName)
		return nil
	case st == service.StatusStopped:
		fmt.Fprintf(w, "service %s: stopped\n", serviceName)
		return exitCode(exitLocked, errors.New("stopped"))
	}
	fmt.Fprintf(w, "service %s: unknown\n", serviceName)
	return exitCode(exitLocked, errors.New("unknown state"))
}

// stderrLog is the log of the daemon in the foreground and under systemd
// (journald reads stderr), as cfg's log.* keys say (the global flags win
// over the file: configFlags.load).
func stderrLog(cfg *config.Config) (zerolog.Logger, io.Writer, func()) {
	return logx.New(os.Stderr, logx.Options{Level: cfg.Log.Level, Format: cfg.Log.Format}), os.Stderr, func() {}
}
