package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

type fleetFlags struct {
	mqtt        mqttFlags
	stages      string
	devices     []string
	rollbackURL string
	key         string
	agent       string
	lines       int
	url         string
	rollback    bool
	timeout     time.Duration
	wait        time.Duration
	json        bool
}

func (f *fleetFlags) dial() mqtt.DialOptions {
	return mqtt.DialOptions{Broker: orDefault(f.mqtt.broker, "tcp://"+broker.DefaultListen), Username: f.mqtt.username,
		Password: f.mqtt.password, CAFile: f.mqtt.ca, CertFile: f.mqtt.cert, KeyFile: f.mqtt.key, Timeout: f.timeout}
}

func newFleetCmd() *cobra.Command {
	fleetCmd := &cobra.Command{Use: "fleet", Short: "Operate a fleet of devices through the hub", Args: cobra.NoArgs}

	var cf fleetFlags
	command := &cobra.Command{
		Use:   "command --device D --key FILE NAME",
		Short: "Send a signed command to a device and print its reply",
		Long: `Sign a command with the fleet's private key (the one that signs templates,
from openstarry templates keygen), publish it to the device's command topic and
print the device's reply as JSON. Commands: ` + strings.Join(fleet.Commands, ", ") + `.
agent.* take --agent; logs.tail takes --lines; update takes --url, the URL of
the new binary with SHA256SUMS and SHA256SUMS.sig beside it (make release),
and prints two replies: installed, then the outcome (committed, rolled_back
or aborted) once the device restarted on trial; give it a --timeout longer
than the device's update.trial_timeout.

A device obeys a command only when one of its design.trusted_keys verifies the
signature, the command names it, has not expired (--timeout) and was never
obeyed before; otherwise it publishes the command to its dead letter topic with
the reason, and no reply comes. Exit status 0 when the command succeeded, 1
otherwise.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return fleetCommand(cmd, cf, args[0]) },
	}
	fl := command.Flags()
	cf.mqtt.bindClient(fl, "hub broker URL: tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]; default tcp://"+broker.DefaultListen)
	fl.StringVar(&cf.key, "key", envOr("OPENSTARRY_FLEET_KEY", ""), "the fleet's private key file (env OPENSTARRY_FLEET_KEY)")
	fl.StringVar(&cf.agent, "agent", "", "agent id, for agent.restart, agent.stop and agent.start")
	fl.StringVar(&cf.url, "url", "", "update: the new binary's http(s):// URL")
	fl.BoolVar(&cf.rollback, "rollback", false, "update: allow a version older than the device runs (signed with the command)")
	fl.IntVar(&cf.lines, "lines", 0, fmt.Sprintf("lines of logs.tail (default 100, at most %d)", fleet.MaxTailLines))
	fl.DurationVar(&cf.timeout, "timeout", 30*time.Second, fmt.Sprintf("how long the command is valid and the reply is awaited (at most %s)", fleet.MaxLifetime))
	fleetCmd.AddCommand(command)

	var sf fleetFlags
	status := &cobra.Command{
		Use:   "status [--broker URL]",
		Short: "Print every device the hub knows, from their retained status and telemetry",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return fleetStatus(cmd, sf) },
	}
	fl = status.Flags()
	sf.mqtt.bindClient(fl, "hub broker URL: tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]; default tcp://"+broker.DefaultListen)
	fl.DurationVar(&sf.wait, "wait", time.Second, "how long to collect the retained messages")
	fl.DurationVar(&sf.timeout, "timeout", 10*time.Second, "connection timeout")
	fl.BoolVar(&sf.json, "json", false, "print JSON")
	fleetCmd.AddCommand(status)

	var uf fleetFlags
	upd := &cobra.Command{
		Use:   "update --url URL --key FILE [--stages 1,10%,100%] [--devices A,B,…] [--rollback-url URL]",
		Short: "Roll a signed update out to the fleet in stages, halting when a device fails it",
		Long: `Send the signed update command (as fleet command … update does for one device)
to the fleet's devices in waves: by default a canary device, then up to a tenth
of the fleet, then the rest (--stages: each is how many devices, a count or a
percentage, are updated once its wave is done). The devices are --devices, or
every device fleet status lists online, in the order of their ids. A wave's
devices are updated at once; each runs the new version on trial and commits it
when its master runs and /healthz answers, or puts the previous one back.

When a device of a wave does not commit (it rolled back, aborted, or no outcome
came within --timeout), no later wave starts, and the devices of that wave that
committed are updated back with --rollback-url (the previous release, signed
the same way); without it they are named. Exit status 0 when every device
committed, 1 otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return fleetStagedUpdate(cmd, uf) },
	}
	fl = upd.Flags()
	uf.mqtt.bindClient(fl, "hub broker URL: tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]; default tcp://"+broker.DefaultListen)
	fl.StringVar(&uf.key, "key", envOr("OPENSTARRY_FLEET_KEY", ""), "the fleet's private key file (env OPENSTARRY_FLEET_KEY)")
	fl.StringVar(&uf.url, "url", "", "the new binary's http(s):// URL (SHA256SUMS and SHA256SUMS.sig beside it)")
	fl.StringVar(&uf.rollbackURL, "rollback-url", "", "the previous release's binary: a failed wave's committed devices are updated back to it")
	fl.StringVar(&uf.stages, "stages", fleet.DefaultStages, "the waves: devices updated once each is done, a count or a percentage")
	fl.StringSliceVar(&uf.devices, "devices", nil, "the devices, in order (default: every device online)")
	fl.DurationVar(&uf.timeout, "timeout", 10*time.Minute, fmt.Sprintf("how long each device has to report its outcome (at most %s)", fleet.MaxLifetime))
	fleetCmd.AddCommand(upd)
	return fleetCmd
}

func fleetCommand(cmd *cobra.Command, f fleetFlags, name string) error {
	if !slices.Contains(fleet.Commands, name) {
		// Checked before anything is signed or sent: a device answers no
		// command it does not know, and the sender would only time out.
		return fmt.Errorf("unknown fleet command %q; the commands are: %s", name, strings.Join(fleet.Commands, ", "))
	}
	if f.key == "" {
		return errors.New("--key is required: the fleet's private key file")
	}
	priv, err := design.ReadPrivateKeyFile(f.key)
	if err != nil {
		return err
	}
	if f.mqtt.device == "" {
		return errors.New("--device is required")
	}
	args := map[string]any{}
	if f.agent != "" {
		args["agent"] = f.agent
	}
	if f.lines > 0 {
		args["lines"] = f.lines
	}
	if name == "update" {
		return fleetUpdate(cmd, f, priv)
	}
	raw, _ := json.Marshal(args)
	if len(args) == 0 {
		raw = nil
	}
	rep, err := fleet.SendCommand(cmd.Context(), f.dial(), orDefault(f.mqtt.prefix, mqtt.DefaultTopicPrefix), f.mqtt.device, name, raw, priv, f.timeout)
	if err != nil {
		return mqttHint(err)
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintln(cmd.OutOrStdout(), string(b))
	if !rep.OK {
		return exitCode(exitFailure, fmt.Errorf("%s on %s: %s", name, f.mqtt.device, rep.Error))
	}
	return nil
}

// fleetStagedUpdate rolls an update out in waves (fleet.StagedUpdate).
func fleetStagedUpdate(cmd *cobra.Command, f fleetFlags) error {
	if f.url == "" {
		return errors.New("--url is required: the new binary's URL (SHA256SUMS and SHA256SUMS.sig beside it)")
	}
	if f.key == "" {
		return errors.New("--key is required: the fleet's private key file")
	}
	stages, err := fleet.ParseStages(f.stages)
	if err != nil {
		return err
	}
	priv, err := design.ReadPrivateKeyFile(f.key)
	if err != nil {
		return err
	}
	prefix := orDefault(f.mqtt.prefix, mqtt.DefaultTopicPrefix)
	devices := f.devices
	if len(devices) == 0 {
		sd := f.dial()
		sd.Timeout = 10 * time.Second
		views, err := fleet.CollectStatus(cmd.Context(), sd, prefix, 2*time.Second)
		if err != nil {
			return mqttHint(err)
		}
		for _, v := range views {
			if v.State == "online" {
				devices = append(devices, v.Device)
			}
		}
		if len(devices) == 0 {
			return errors.New("no device is online on the hub (fleet status lists none): nothing to update")
		}
	}
	su := fleet.StagedUpdate{Devices: devices, Stages: stages, URL: f.url, RollbackURL: f.rollbackURL, Out: cmd.OutOrStdout(),
		Update: func(ctx context.Context, device, url string) (*fleet.Outcome, error) {
			// Going back to --rollback-url is a rollback the operator
			// signs: the device refuses an older release otherwise.
			rollback := f.rollback || (f.rollbackURL != "" && url == f.rollbackURL)
			first, outcome, err := fleet.SendUpdate(ctx, f.dial(), prefix, device, url, rollback, priv, f.timeout)
			switch {
			case first != nil && !first.OK:
				return nil, errors.New(first.Error)
			case err != nil:
				return nil, mqttHint(err)
			}
			return fleet.OutcomeOf(outcome)
		}}
	if err := su.Run(cmd.Context()); err != nil {
		return exitCode(exitFailure, err)
	}
	return nil
}

// fleetUpdate sends update and prints its two replies: installed, then the
// outcome.
func fleetUpdate(cmd *cobra.Command, f fleetFlags, priv ed25519.PrivateKey) error {
	if f.url == "" {
		return errors.New("update needs --url: the new binary's URL (SHA256SUMS and SHA256SUMS.sig beside it)")
	}
	first, outcome, err := fleet.SendUpdate(cmd.Context(), f.dial(), orDefault(f.mqtt.prefix, mqtt.DefaultTopicPrefix), f.mqtt.device, f.url, f.rollback, priv, f.timeout)
	for _, r := range []*fleet.Reply{first, outcome} {
		if r != nil {
			b, _ := json.Marshal(r)
			fmt.Fprintln(cmd.OutOrStdout(), string(b))
		}
	}
	switch {
	case first != nil && !first.OK:
		return exitCode(exitFailure, fmt.Errorf("update on %s: %s", f.mqtt.device, first.Error))
	case err != nil:
		return exitCode(exitFailure, mqttHint(err))
	case !outcome.OK:
		return exitCode(exitFailure, fmt.Errorf("update on %s: %s", f.mqtt.device, outcome.Error))
	}
	return nil
}

func fleetStatus(cmd *cobra.Command, f fleetFlags) error {
	views, err := fleet.CollectStatus(cmd.Context(), f.dial(), orDefault(f.mqtt.prefix, mqtt.DefaultTopicPrefix), f.wait)
	if err != nil {
		return mqttHint(err)
	}
	if f.json {
		b, _ := json.Marshal(views)
		fmt.Fprintln(cmd.OutOrStdout(), string(b))
		return nil
	}
	printFleet(cmd.OutOrStdout(), views, time.Now())
	return nil
}

// printFleet writes one line per device. UP is the time since the device's
// daemon started, now (not the uptime its last telemetry reported); a
// device that is not online has no UP, and one that stopped cleanly has no
// agent running.
func printFleet(w io.Writer, views []fleet.DeviceView, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DEVICE\tSTATE\tVERSION\tUP\tAGENTS\tRESTARTS\tSTORE\tDISK FREE\tSEEN")
	for _, v := range views {
		state := orDefault(v.State, "-")
		ver, up, agents, restarts, store, free, seen := "-", "-", "-", "-", "-", "-", "-"
		if t := v.Telemetry; t != nil {
			ver = t.Version
			if v.State == "online" {
				started := t.Started
				if started.IsZero() {
					started = t.Time.Add(-time.Duration(t.UptimeSeconds) * time.Second)
				}
				up = shortDur(now.Sub(started).Truncate(time.Second))
			}
			running, total, rs := 0, len(t.Agents), 0
			for _, a := range t.Agents {
				if a.State == "running" {
					running++
				}
				rs += a.Restarts
			}
			if v.State == "offline" && v.Reason == "stopped" {
				running = 0 // the daemon stopped its agents before it said so
			}
			agents = fmt.Sprintf("%d/%d running", running, total)
			if v.State == "offline" && v.Reason != "stopped" {
				agents = fmt.Sprintf("%d/%d at last report", running, total) // lost, not stopped: unknown now
			}
			restarts = strconv.Itoa(rs)
			store = humanBytes(t.StoreBytes)
			if t.DiskFreeBytes >= 0 {
				free = humanBytes(t.DiskFreeBytes)
			}
			seen = shortDur(now.Sub(t.Time)) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.Device, state, ver, up, agents, restarts, store, free, seen)
	}
	tw.Flush()
	// Degraded boots: agents on a cached template.
	for _, v := range views {
		if v.Telemetry == nil {
			continue
		}
		for _, a := range v.Telemetry.Agents {
			if a.Degraded {
				fmt.Fprintf(w, "degraded: %s %s runs template %s %s from the cache: %s\n", v.Device, a.ID, a.Template, a.TemplateVersion, a.DegradedReason)
			}
		}
	}
	// The tasks in hand, as the devices last reported them.
	var running []control.AgentInfo
	var devices []string
	for _, v := range views {
		if v.Telemetry == nil {
			continue
		}
		for _, a := range v.Telemetry.Agents {
			if a.Current != nil {
				running = append(running, control.AgentInfo{ID: a.ID, Current: a.Current})
				devices = append(devices, v.Device)
			}
		}
	}
	if len(running) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "DEVICE\tAGENT\tTASK\tSTEP\tDOING\tELAPSED")
		for i, a := range running {
			c := a.Current
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", devices[i], a.ID, c.TaskID, c.Step+1, doing(c),
				shortDur(time.Duration(c.ElapsedMs)*time.Millisecond))
		}
		tw.Flush()
	}
}

func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
