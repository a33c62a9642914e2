package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

func newStatusCmd() *cobra.Command {
	var f configFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status [--config FILE] [--data DIR] [--json]",
		Short: "Print the daemon's agents: pid, state, tick, restarts, last error",
		Long: `Ask the daemon running on the data directory (through DATA/run/control.sock
and DATA/run/control.token) for its agents and print them as a table, or as
JSON with --json. Exit status 1 when no daemon runs there.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			c, err := control.Discover(cfg.Data)
			if err != nil {
				return err
			}
			defer c.Close()
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(st)
			}
			printStatus(cmd.OutOrStdout(), st, time.Now())
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// printStatus writes the daemon line, the boot phases and the agents table.
func printStatus(w io.Writer, st *control.Status, now time.Time) {
	fmt.Fprintf(w, "daemon pid %d, version %s, up %s, data %s", st.PID, st.Version, shortDur(now.Sub(st.Started)), st.Data)
	if st.HTTP != "" {
		fmt.Fprintf(w, ", http %s", st.HTTP)
	}
	if st.PreviousRun != "" {
		fmt.Fprintf(w, ", previous run %s", st.PreviousRun)
	}
	fmt.Fprintln(w)
	if len(st.Phases) > 0 {
		var ps []string
		for _, p := range st.Phases {
			ps = append(ps, fmt.Sprintf("%d %s %.1fms", p.N, p.Name, p.DurationMs))
		}
		fmt.Fprintf(w, "boot: %s\n", strings.Join(ps, " · "))
	}
	if ss := st.StateStore; ss != nil {
		if ss.Durable {
			fmt.Fprintf(w, "state store: %s (durable)\n", ss.URL)
		} else {
			fmt.Fprintf(w, "state store: %s (NOT durable: %s)\n", ss.URL, ss.Warning)
		}
	}
	if st.Notice != "" {
		fmt.Fprintf(w, "notice from the first boot: %s\n", st.Notice)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tROLE\tTEMPLATE\tPID\tSTATE\tTICK\tQUEUE\tRESTARTS\tSINCE\tSOURCE\tLAST ERROR")
	for _, a := range st.Agents {
		pid, tick, queue := "-", "-", "-"
		if a.PID != 0 {
			pid = strconv.Itoa(a.PID)
		}
		if a.Snapshot {
			tick, queue = strconv.FormatUint(a.Tick, 10), strconv.Itoa(a.Queue)
		}
		state := a.State
		if a.Recovered {
			state += " (recovered)"
		}
		lastErr := a.LastError
		if lastErr == "" {
			lastErr = "-"
		}
		if len(lastErr) > 100 {
			lastErr = lastErr[:97] + "..."
		}
		tmpl, source := a.Template, a.Source
		if a.TemplateVersion != "" {
			tmpl += "@" + a.TemplateVersion
		}
		if source == "" {
			source = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", a.ID, a.Role, tmpl, pid, state, tick, queue,
			a.Restarts, shortDur(now.Sub(a.Since)), source, lastErr)
	}
	tw.Flush()
	var damaged []string
	for _, a := range st.Agents {
		if a.StoreDamage > 0 {
			damaged = append(damaged, fmt.Sprintf("  %s: %d damaged parts found, %d rewritten from a good copy (the agent's log names them)",
				a.ID, a.StoreDamage, a.StoreRepaired))
		}
	}
	if st.SessionsDamage > 0 {
		damaged = append(damaged, fmt.Sprintf("  sessions.db: %d damaged parts found (the daemon's log names them)", st.SessionsDamage))
	}
	if len(damaged) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "store damage found by the scrub (docs/storage-damage.md):")
		for _, l := range damaged {
			fmt.Fprintln(w, l)
		}
	}
	for _, a := range st.Agents {
		if a.Degraded {
			fmt.Fprintf(w, "degraded: %s runs template %s %s from the cache: %s\n", a.ID, a.Template, a.TemplateVersion, a.DegradedReason)
		}
	}
	printRunning(w, st.Agents, now)
	if len(st.Interrupted) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(w, "interrupted at boot (snapshot not closed cleanly):")
		for _, in := range st.Interrupted {
			if in.Error != "" {
				fmt.Fprintf(w, "  %s: %s\n", in.AgentID, in.Error)
			} else {
				fmt.Fprintf(w, "  %s at tick %d, status %s\n", in.AgentID, in.Tick, in.Status)
			}
		}
	}
}

// printRunning writes the tasks the agents have in hand, when any runs: the
// task, its step and what it does there (a tool, the model and the tokens it
// streamed), how long it has run and when it last progressed.
func printRunning(w io.Writer, agents []control.AgentInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	n := 0
	for _, a := range agents {
		c := a.Current
		if c == nil {
			continue
		}
		if n == 0 {
			fmt.Fprintln(w)
			fmt.Fprintln(tw, "RUNNING\tTASK\tSTEP\tDOING\tELAPSED\tLAST PROGRESS")
		}
		n++
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s ago\n", a.ID, c.TaskID, c.Step+1, doing(c),
			shortDur(time.Duration(c.ElapsedMs)*time.Millisecond), shortDur(now.Sub(c.Updated)))
	}
	tw.Flush()
}

// doing says what a running task does now: "tool sleep_ms", "thinking (42
// tokens)", "waiting for model".
func doing(c *control.CurrentTask) string {
	switch {
	case c.Tool != "":
		return "tool " + c.Tool
	case c.Tokens > 0:
		return fmt.Sprintf("%s (%d tokens)", c.Phase, c.Tokens)
	}
	return c.Phase
}

// shortDur prints a duration to the second, or to the millisecond under one.
func shortDur(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
