package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

func newAgentCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent restart|stop ID",
		Short: "Restart or stop one of the daemon's agents",
		Args:  cobra.NoArgs,
	}
	for _, action := range []struct {
		name, short, long string
	}{
		{"restart", "Restart an agent with its blueprint resolved again; also takes it out of crashloop or stopped",
			`Restart an agent: its template is resolved again (a new blueprint takes
effect only this way), the running process stops (SIGTERM, then SIGKILL after
supervise.stop_timeout) and a new one starts. It returns once the agent is
online again, or with its error. An agent in crashloop or stopped is started.`},
		{"stop", "Stop an agent; it stays stopped until `openstarry agent restart ID`",
			`Stop an agent (SIGTERM; it finishes its tick and saves). The daemon does not
restart it until "openstarry agent restart ID". A stopped worker is not
restored at the next boot.`},
	} {
		var f configFlags
		sub := &cobra.Command{
			Use:   action.name + " ID",
			Short: action.short,
			Long:  action.long,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id := args[0]
				if err := agent.ValidateID(id); err != nil {
					return err
				}
				cfg, err := f.load(cmd)
				if err != nil {
					return err
				}
				c, err := control.Discover(cfg.Data)
				if err != nil {
					return err
				}
				defer c.Close()
				var info *control.AgentInfo
				if action.name == "restart" {
					info, err = c.Restart(cmd.Context(), id)
				} else {
					info, err = c.Stop(cmd.Context(), id)
				}
				if err != nil {
					return err
				}
				pid := "-"
				if info.PID != 0 {
					pid = strconv.Itoa(info.PID)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (pid %s, restarts %d)\n", info.ID, info.State, pid, info.Restarts)
				return nil
			},
		}
		f.bind(sub)
		cmd.AddCommand(sub)
	}
	return cmd
}
