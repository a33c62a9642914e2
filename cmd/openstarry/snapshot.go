package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/migrate"
)

type snapshotFlags struct {
	agent string
	data  string
	store string
	g     *globals
}

func (f *snapshotFlags) bind(cmd *cobra.Command, g *globals) {
	f.g = g
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", "", "agent id")
	bindKeyString(fl, &f.data, "data", "data directory")
	bindKeyString(fl, &f.store, "store", "store URL; default bbolt:// under the data directory")
	_ = cmd.MarkFlagRequired("agent")
}

func (f *snapshotFlags) open(ctx context.Context) (plugin.Storage, error) {
	if err := agent.ValidateID(f.agent); err != nil {
		return nil, fmt.Errorf("--agent: %w", err)
	}
	st, err := openStore(ctx, f.store, f.data, f.g.logger())
	if err != nil {
		return nil, err
	}
	return st, nil
}

func newSnapshotCmd(g *globals) *cobra.Command {
	snapshotCmd := &cobra.Command{
		Use:   "snapshot",
		Short: "Read, move or delete stored snapshots as the contract JSON",
	}
	var show snapshotFlags
	showCmd := &cobra.Command{
		Use:   "show --agent ID",
		Short: "Print the stored snapshot as the contract JSON",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := show.load(cmd.Context())
			if err != nil {
				return err
			}
			return printSnapshot(s)
		},
	}
	show.bind(showCmd, g)

	var export snapshotFlags
	var exportOut string
	exportCmd := &cobra.Command{
		Use:   "export --agent ID [--out FILE]",
		Short: "Write the stored snapshot as the contract JSON to a file (default stdout)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := export.load(cmd.Context())
			if err != nil {
				return err
			}
			if exportOut == "" || exportOut == "-" {
				return printSnapshot(s)
			}
			data, err := agent.Encode(s)
			if err != nil {
				return err
			}
			if err := os.WriteFile(exportOut, append(data, '\n'), 0o600); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "exported agent %s at tick %d to %s\n", s.AgentID, s.TickIndex, exportOut)
			return nil
		},
	}
	export.bind(exportCmd, g)
	exportCmd.Flags().StringVar(&exportOut, "out", "", "output file; default stdout")

	var imp snapshotFlags
	var impIn string
	var impForce bool
	importCmd := &cobra.Command{
		Use:   "import --agent ID --in FILE [--force]",
		Short: "Store a snapshot from its contract JSON (refuses to overwrite without --force)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var data []byte
			var err error
			if impIn == "" || impIn == "-" {
				data, err = io.ReadAll(os.Stdin)
			} else {
				data, err = os.ReadFile(impIn)
			}
			if err != nil {
				return err
			}
			s, err := agent.Decode(data)
			if err != nil {
				return fmt.Errorf("%s: %w", orDefault(impIn, "stdin"), err)
			}
			if s.AgentID != imp.agent {
				return fmt.Errorf("the snapshot is of agent %q, not %q", s.AgentID, imp.agent)
			}
			st, err := imp.open(ctx)
			if err != nil {
				return err
			}
			defer st.Close()
			old, err := st.Load(ctx, imp.agent)
			if err != nil && !errors.Is(err, plugin.ErrCorrupt) {
				return lockedExit(err)
			}
			if (old != nil || err != nil) && !impForce {
				return fmt.Errorf("agent %q already has a stored snapshot: pass --force to replace it", imp.agent)
			}
			if err := st.Save(ctx, s); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "imported agent %s at tick %d\n", s.AgentID, s.TickIndex)
			return nil
		},
	}
	imp.bind(importCmd, g)
	importCmd.Flags().StringVar(&impIn, "in", "", "input file; default stdin")
	importCmd.Flags().BoolVar(&impForce, "force", false, "replace an existing snapshot")

	var del snapshotFlags
	deleteCmd := &cobra.Command{
		Use:   "delete --agent ID",
		Short: "Delete everything stored for an agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := del.open(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			stored, err := isStored(cmd.Context(), st, del.agent)
			if err != nil {
				return lockedExit(err)
			}
			if !stored {
				return exitCode(1, fmt.Errorf("nothing to delete: no agent %s is stored in %s", del.agent, orDefault(del.store, "bbolt://")))
			}
			if err := st.Delete(cmd.Context(), del.agent); err != nil {
				return lockedExit(err)
			}
			fmt.Fprintf(os.Stderr, "deleted agent %s\n", del.agent)
			return nil
		},
	}
	del.bind(deleteCmd, g)

	var from, to, data string
	migrateCmd := &cobra.Command{
		Use:   "migrate --from URL --to URL",
		Short: "Copy every agent between stores and verify each copy",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := g.logger()
			src, err := openStore(ctx, from, data, log)
			if err != nil {
				return err
			}
			defer src.Close()
			dst, err := openStore(ctx, to, data, log)
			if err != nil {
				return err
			}
			defer dst.Close()
			rep, err := migrate.Migrate(ctx, src, dst, log)
			if err != nil {
				return lockedExit(err)
			}
			fmt.Printf("migrated %d agents (%d bytes) from %s to %s in %s; every copy verified\n",
				len(rep.Copied), rep.Bytes, from, to, rep.Duration.Round(time.Millisecond))
			return nil
		},
	}
	mf := migrateCmd.Flags()
	mf.StringVar(&from, "from", "", "source store URL")
	mf.StringVar(&to, "to", "", "destination store URL")
	bindKeyString(mf, &data, "data", "data directory, for URLs without a path")
	_ = migrateCmd.MarkFlagRequired("from")
	_ = migrateCmd.MarkFlagRequired("to")

	snapshotCmd.AddCommand(showCmd, exportCmd, importCmd, deleteCmd, migrateCmd)
	return snapshotCmd
}

// load opens the store and loads the agent's snapshot, with the errors an
// operator needs: locked (the agent runs), none stored, corrupt.
func (f *snapshotFlags) load(ctx context.Context) (*agent.Snapshot, error) {
	st, err := f.open(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	s, err := st.Load(ctx, f.agent)
	if errors.Is(err, plugin.ErrLocked) {
		return nil, exitCode(exitLocked, fmt.Errorf("%w\n(the agent is running: read its live snapshot with GET /agents/%s/snapshot)", err, f.agent))
	}
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("no snapshot stored for agent %q", f.agent)
	}
	return s, nil
}

// isStored reports whether st holds anything for agent id: by its list
// when it can enumerate its agents, else by a load (a corrupt snapshot is
// something stored, and may be deleted).
func isStored(ctx context.Context, st plugin.Storage, id string) (bool, error) {
	if l, ok := st.(plugin.Lister); ok {
		ids, err := l.List(ctx)
		if err != nil {
			return false, err
		}
		return slices.Contains(ids, id), nil
	}
	s, err := st.Load(ctx, id)
	switch {
	case errors.Is(err, plugin.ErrNotFound):
		return false, nil
	case errors.Is(err, plugin.ErrLocked):
		return false, err
	case err != nil:
		return true, nil
	}
	return s != nil, nil
}

func printSnapshot(s *agent.Snapshot) error {
	data, err := agent.Encode(s)
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(data, '\n'))
	return err
}
