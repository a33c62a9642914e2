//go:build nosqlite

package main

import (
	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/plugin"
)

// A build with -tags nosqlite has no session continuity (sessions.db is a
// SQLite file): the project, session and approval commands are there, so
// that whoever types one learns why it does nothing, and each of them,
// with any subcommand or flag, fails naming the build.
func newSessionCmds() []*cobra.Command {
	var cmds []*cobra.Command
	for _, c := range []struct{ use, short string }{
		{"project", "Projects (not in this build: built with -tags nosqlite)"},
		{"session", "Sessions of a project (not in this build: built with -tags nosqlite)"},
		{"approval", "Human approvals (not in this build: built with -tags nosqlite)"},
	} {
		cmds = append(cmds, &cobra.Command{
			Use:                c.use,
			Short:              c.short,
			DisableFlagParsing: true,
			RunE: func(*cobra.Command, []string) error {
				return plugin.NotCompiledIn("session continuity", "nosqlite")
			},
		})
	}
	return cmds
}
