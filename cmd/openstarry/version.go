package main

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, build date and platform",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "openstarry %s\ncommit: %s\nbuilt: %s\nplatform: %s/%s\ngo: %s\n",
				version, commit, date, runtime.GOOS, runtime.GOARCH, runtime.Version())
		},
	})
}
