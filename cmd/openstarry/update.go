package main

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/updater"
)

func newUpdateCmd(g *globals) *cobra.Command {
	var f configFlags
	var from string
	var wait time.Duration
	var rollback bool
	cmd := &cobra.Command{
		Use:   "update --from FILE|URL [--config FILE] [--data DIR]",
		Short: "Install a signed openstarry binary; the daemon runs it on trial and rolls back by itself",
		Long: `Install a new openstarry binary on this device. --from is the binary's file or
http(s):// URL; SHA256SUMS and SHA256SUMS.sig must be beside it (what make
release and openstarry sign-release write), signed by one of
design.trusted_keys, and must list the binary's sha256. It must be built for
this platform, and the snapshot schema it declares (version --json) must be
one this version loads, so that a rollback loses nothing.

The binary is written to DATA/bin/openstarry.new, fsynced, and renamed over
DATA/bin/openstarry (the running binary is kept as DATA/bin/openstarry.prev).
When a daemon runs on the data directory, it restarts into the new version
on trial and this command waits for the outcome: committed once the master
is online and /healthz answers within update.trial_timeout, rolled back
after update.max_boots starts without that. Otherwise the next start runs it
on trial.

A version older than the one the daemon runs (or, with no daemon, the one
installed in DATA/bin) is refused unless --rollback says it is wanted.

Exit status: 0 when installed (and committed, with a running daemon), 1
when refused or rolled back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" {
				return errors.New("--from is required: the binary's file or URL")
			}
			if err := updater.Supported(); err != nil {
				return err
			}
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			return updater.Install(cmd.Context(), cmd.OutOrStdout(), cfg, selfInfo(), updater.Request{From: from, Wait: wait, Rollback: rollback}, g.logger())
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&from, "from", "", "the new binary: a file or an http(s):// URL, with SHA256SUMS and SHA256SUMS.sig beside it")
	cmd.Flags().BoolVar(&rollback, "rollback", false, "install it even if it is older than the running version")
	cmd.Flags().DurationVar(&wait, "wait", 0, "how long to wait for the outcome with a running daemon (default update.trial_timeout × update.max_boots + 1m)")
	return cmd
}
