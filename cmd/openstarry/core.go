package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/design"
)

// envParentPipe is set by the daemon: the child's stdin is a pipe whose
// end means the daemon is gone (or wants it to stop, on Windows).
const envParentPipe = "OPENSTARRY_PARENT_PIPE"

func newCoreCmd(g *globals) *cobra.Command {
	var f runFlags
	var digest, source string
	cmd := &cobra.Command{
		Use:    "core --agent ID --template FILE",
		Short:  "An agent process spawned by the daemon (not for people)",
		Hidden: true,
		Long: `core runs one agent exactly as "openstarry run --template FILE" does, from the
blueprint the daemon froze for it. The daemon reads its readiness from the
"listening on http://..." log line, hands it the control API in
OPENSTARRY_CONTROL and OPENSTARRY_CONTROL_TOKEN (for the agent_manager tool),
and keeps its stdin open: when the daemon dies, stdin ends and so does the
agent.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.agent == "" {
				return errors.New("--agent is required")
			}
			if !design.IsFile(f.template) {
				return fmt.Errorf("--template %q: core runs a frozen blueprint file (DATA/run/blueprints/ID/NAME.json)", f.template)
			}
			f.daemonChild, f.digest, f.source = true, digest, source
			dropDaemonProcs()
			oneProcessor()
			if os.Getenv(envParentPipe) == "1" {
				go watchParent(os.Stdin)
			}
			return runAgent(cmd.Context(), f, g.logger())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.agent, "agent", "", "agent id")
	fl.StringVar(&f.template, "template", "", "frozen blueprint file")
	fl.StringVar(&digest, "template-digest", "", "the frozen blueprint's digest (sha256:HEX): checked instead of validating the template again")
	fl.StringVar(&source, "template-source", "", "where the daemon resolved the template (remote, cache, local, embedded): the agent reports it as its template_source")
	fl.StringVar(&f.listen, "listen", "127.0.0.1:0", "HTTP listen address")
	fl.StringVar(&f.token, "token", "", "bearer token required for HTTP requests from off loopback")
	f.keys = bindKeys(fl, runKeys...)
	return cmd
}

// watchParent stops the agent when its stdin ends: the daemon closed it or
// died. The agent then finishes its tick and saves (stopSelf).
func watchParent(stdin io.Reader) {
	_, _ = io.Copy(io.Discard, stdin)
	stopSelf()
}
