//go:build nohub

package main

import (
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// A build with -tags nohub (the small build) has no enrolment hub: `openstarry
// hub` is the operator's side of enrolment and runs beside the fleet's
// broker, not on a board. Devices keep `openstarry enroll`. The command is
// there, so that whoever types it learns why it does nothing.
func newHubCmd(*globals) *cobra.Command {
	return &cobra.Command{
		Use:                "hub",
		Short:              "The enrolment hub (not in this build: built with -tags nohub)",
		DisableFlagParsing: true,
		RunE: func(*cobra.Command, []string) error {
			return plugin.NotCompiledIn("the enrolment hub", "nohub")
		},
	}
}

// hubCompiledIn is what version says of the enrolment hub.
const hubCompiledIn = "not compiled in (nohub)"
