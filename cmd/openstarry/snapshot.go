package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

var snapshotCmd = &cobra.Command{
	Use:   "snapshot",
	Short: "Read, move or delete stored snapshots as the contract JSON",
}

type snapshotFlags struct {
	agent string
	data  string
	store string
}

func (f *snapshotFlags) bind(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", "", "agent id")
	fl.StringVar(&f.data, "data", envOr("OPENSTARRY_DATA", "./data"), "data directory (env OPENSTARRY_DATA)")
	fl.StringVar(&f.store, "store", envOr("OPENSTARRY_STORE", ""), "store URL; default bbolt:// under the data directory (env OPENSTARRY_STORE)")
	_ = cmd.MarkFlagRequired("agent")
}

func (f *snapshotFlags) open(ctx context.Context) (plugin.Storage, error) {
	if err := agent.ValidateID(f.agent); err != nil {
		return nil, fmt.Errorf("--agent: %w", err)
	}
	st, err := openStore(ctx, f.store, f.data)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func init() {
	var show snapshotFlags
	showCmd := &cobra.Command{
		Use:   "show --agent ID",
		Short: "Print the stored snapshot as the contract JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := show.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			s, err := st.Load(cmd.Context(), show.agent)
			if errors.Is(err, plugin.ErrLocked) {
				return exitCode(exitLocked, fmt.Errorf("%w\n(the agent is running: read its live snapshot with GET /agents/%s/snapshot)", err, show.agent))
			}
			if err != nil {
				return err
			}
			if s == nil {
				return fmt.Errorf("no snapshot stored for agent %q", show.agent)
			}
			return printSnapshot(s)
		},
	}
	show.bind(showCmd)
	snapshotCmd.AddCommand(showCmd)
	rootCmd.AddCommand(snapshotCmd)
}

func printSnapshot(s *agent.Snapshot) error {
	data, err := agent.Encode(s)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(data, '\n'))
	return err
}
