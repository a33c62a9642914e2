//go:build !nosqlite

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/session"
)

// The project, session and approval commands talk to the daemon's HTTP API
// (found through its control socket, or --url): the daemon owns
// sessions.db and the dispatchers, so a resume or a decision must go
// through it to start a dispatcher or release a waiting task.

type apiFlags struct {
	configFlags
	url    string
	asJSON bool
}

func (f *apiFlags) bind(cmd *cobra.Command, listing bool) {
	f.configFlags.bind(cmd)
	cmd.Flags().StringVar(&f.url, "url", "", "the daemon's HTTP address (default: asked of the daemon on the data directory)")
	if listing {
		cmd.Flags().BoolVar(&f.asJSON, "json", false, "print JSON")
	}
}

// apiClient is the daemon's session API.
type apiClient struct {
	base, token string
	hc          *http.Client
}

func (f *apiFlags) client(cmd *cobra.Command) (*apiClient, error) {
	cfg, err := f.load(cmd)
	if err != nil {
		return nil, err
	}
	c := &apiClient{base: strings.TrimRight(f.url, "/"), token: cfg.HTTP.Token, hc: &http.Client{Timeout: 30 * time.Second}}
	if c.base == "" {
		cc, err := control.Discover(cfg.Data)
		if err != nil {
			return nil, err
		}
		defer cc.Close()
		st, err := cc.Status(cmd.Context())
		if err != nil {
			return nil, err
		}
		if st.HTTP == "" {
			return nil, errors.New("the daemon has no HTTP listener (http.listen is empty); nothing serves sessions")
		}
		c.base = st.HTTP
	}
	return c, nil
}

func (c *apiClient) do(ctx context.Context, method, path string, in []byte, out any) error {
	var body io.Reader
	if in != nil {
		body = bytes.NewReader(in)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var e struct{ Error, Code string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s (%s, %s)", e.Error, e.Code, resp.Status)
		}
		return fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data))
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], data...)
		return nil
	}
	return json.Unmarshal(data, out)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func ago(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}

// apiCommand is one command that asks the daemon's API. Its arguments are
// checked before the daemon is looked for; run asks and returns the answer,
// printed as JSON with --json (listing) and otherwise by text.
type apiCommand struct {
	use, short string
	args       cobra.PositionalArgs
	listing    bool // it has --json
	check      func(cmd *cobra.Command, args []string) error
	run        func(ctx context.Context, c *apiClient, args []string) (answer any, text func(io.Writer), err error)
}

// add makes the command under parent and returns it, for its own flags.
func (a apiCommand) add(parent *cobra.Command) *cobra.Command {
	var f apiFlags
	cmd := &cobra.Command{
		Use: a.use, Short: a.short, Args: a.args,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.check != nil {
				if err := a.check(cmd, args); err != nil {
					return err
				}
			}
			c, err := f.client(cmd)
			if err != nil {
				return err
			}
			answer, text, err := a.run(cmd.Context(), c, args)
			if err != nil {
				return err
			}
			if f.asJSON {
				return printJSON(cmd.OutOrStdout(), answer)
			}
			text(cmd.OutOrStdout())
			return nil
		},
	}
	f.bind(cmd, a.listing)
	parent.AddCommand(cmd)
	return cmd
}

// projectArg checks the optional PROJECT argument.
func projectArg(_ *cobra.Command, args []string) error {
	if len(args) == 1 {
		return session.ValidateProjectID(args[0])
	}
	return nil
}

// table writes a header and the rows, in aligned columns.
func table(w io.Writer, header string, rows func(tw io.Writer)) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	rows(tw)
	tw.Flush()
}

// newSessionCmds builds the project, session and approval commands.
func newSessionCmds() []*cobra.Command {
	project := &cobra.Command{Use: "project", Short: "Projects: plans of tasks the daemon runs across sessions"}
	session_ := &cobra.Command{Use: "session", Short: "Sessions of a project: list, show, resume an interrupted one"}
	approval := &cobra.Command{Use: "approval", Short: "Human approvals: list, approve, reject, request a revision"}

	showProject := func(v *session.ProjectView) func(io.Writer) {
		return func(w io.Writer) { printProject(w, v) }
	}
	var plan []byte
	apiCommand{
		use: "create FILE|-", short: "Create a project from a plan (the JSON body of POST /projects); prints its id and tasks",
		args: cobra.ExactArgs(1), listing: true,
		check: func(cmd *cobra.Command, args []string) error {
			var err error
			if args[0] == "-" {
				plan, err = io.ReadAll(io.LimitReader(cmd.InOrStdin(), 1<<20+1))
			} else {
				plan, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			if _, err := session.DecodeCreateRequest(bytes.NewReader(plan)); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			return nil
		},
		run: func(ctx context.Context, c *apiClient, _ []string) (any, func(io.Writer), error) {
			var v session.ProjectView
			err := c.do(ctx, "POST", "/projects", plan, &v)
			return v, showProject(&v), err
		},
	}.add(project)
	apiCommand{
		use: "list", short: "List the projects with their newest session", args: cobra.NoArgs, listing: true,
		run: func(ctx context.Context, c *apiClient, _ []string) (any, func(io.Writer), error) {
			var ps []session.Project
			err := c.do(ctx, "GET", "/projects", nil, &ps)
			return ps, func(w io.Writer) {
				table(w, "PROJECT\tNAME\tCREATED\tSESSION\tSTATUS", func(tw io.Writer) {
					for _, p := range ps {
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", p.ID, p.Name, ago(p.CreatedAt), p.SessionID, p.Status)
					}
				})
			}, err
		},
	}.add(project)
	apiCommand{
		use: "show PROJECT", short: "Show a project: its tasks with their progress, its sessions", args: cobra.ExactArgs(1), listing: true,
		check: projectArg,
		run: func(ctx context.Context, c *apiClient, args []string) (any, func(io.Writer), error) {
			var v session.ProjectView
			err := c.do(ctx, "GET", "/projects/"+args[0], nil, &v)
			return v, showProject(&v), err
		},
	}.add(project)

	apiCommand{
		use: "list [PROJECT]", short: "List the sessions of a project (of every project without one)", args: cobra.MaximumNArgs(1), listing: true,
		run: func(ctx context.Context, c *apiClient, args []string) (any, func(io.Writer), error) {
			ss, err := listSessions(ctx, c, args)
			return ss, func(w io.Writer) {
				table(w, "SESSION\tPROJECT\tSTATUS\tREASON\tPARENT\tSTARTED\tENDED\tPHASE\tTASK", func(tw io.Writer) {
					for _, s := range ss {
						ended := "-"
						if s.EndedAt != nil {
							ended = ago(*s.EndedAt)
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.ID, s.ProjectID, s.Status, dash(s.InterruptionReason),
							dash(s.ParentSessionID), ago(s.StartedAt), ended, s.CurrentPhase, dash(s.CurrentTaskID))
					}
				})
			}, err
		},
	}.add(session_)
	var showOf, resumeOf string // --project of session show and session resume
	apiCommand{
		use: "show SESSION", short: "Show a session: its state, checkpoint, approvals and approaches", args: cobra.ExactArgs(1),
		run: func(ctx context.Context, c *apiClient, args []string) (any, func(io.Writer), error) {
			p, err := projectOf(ctx, c, showOf, args[0])
			if err != nil {
				return nil, nil, err
			}
			var v json.RawMessage
			err = c.do(ctx, "GET", "/projects/"+p+"/sessions/"+args[0], nil, &v)
			return v, func(w io.Writer) { _, _ = w.Write(v) }, err
		},
	}.add(session_).Flags().StringVar(&showOf, "project", "", "the session's project (default: looked up)")
	apiCommand{
		use: "resume SESSION", short: "Resume an interrupted session: a child session continues the remaining tasks",
		args: cobra.ExactArgs(1), listing: true,
		run: func(ctx context.Context, c *apiClient, args []string) (any, func(io.Writer), error) {
			p, err := projectOf(ctx, c, resumeOf, args[0])
			if err != nil {
				return nil, nil, err
			}
			var res session.ResumeResult
			if err := c.do(ctx, "POST", "/projects/"+p+"/sessions/"+args[0]+"/resume", nil, &res); err != nil {
				return nil, nil, err
			}
			return res, func(w io.Writer) {
				var rc session.ResumeContext
				_ = json.Unmarshal(res.ResumeContext, &rc)
				fmt.Fprintf(w, "session %s resumed as %s (project %s): %d task(s) remain\n",
					args[0], res.Session.ID, p, len(rc.RemainingTasks))
			}, nil
		},
	}.add(session_).Flags().StringVar(&resumeOf, "project", "", "the session's project (default: looked up)")

	var status string
	apiCommand{
		use: "list [PROJECT]", short: "List approvals (of one project, or all)", args: cobra.MaximumNArgs(1), listing: true,
		check: projectArg,
		run: func(ctx context.Context, c *apiClient, args []string) (any, func(io.Writer), error) {
			path := "/approvals"
			if len(args) == 1 {
				path = "/projects/" + args[0] + "/approvals"
			}
			if status != "" {
				path += "?status=" + url.QueryEscape(status)
			}
			var as []session.Approval
			err := c.do(ctx, "GET", path, nil, &as)
			return as, func(w io.Writer) {
				table(w, "ID\tPROJECT\tTASK\tATTEMPT\tTYPE\tLEADER\tSTATUS\tSUBMITTED\tFEEDBACK", func(tw io.Writer) {
					for _, a := range as {
						fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.ProjectID, a.TaskID, a.Attempt, a.CheckpointType,
							a.LeaderID, a.Status, ago(a.SubmittedAt), dash(a.Feedback))
					}
				})
			}, err
		},
	}.add(approval).Flags().StringVar(&status, "status", "", "only pending, approved, rejected or revision_requested")
	for _, d := range []struct{ decision, short string }{
		{"approve", "Approve: the waiting task completes"},
		{"reject", "Reject: the waiting task fails and its dependents are blocked"},
		{"revise", "Request a revision: the task runs again with the feedback (required)"},
	} {
		var feedback, by string
		cmd := apiCommand{
			use: d.decision + " ID", short: d.short, args: cobra.ExactArgs(1),
			check: func(_ *cobra.Command, args []string) error {
				_, err := session.ParseApprovalID(args[0])
				return err
			},
			run: func(ctx context.Context, c *apiClient, args []string) (any, func(io.Writer), error) {
				body, _ := json.Marshal(session.Decision{Decision: d.decision, Feedback: feedback, DecidedBy: by})
				var a session.Approval
				err := c.do(ctx, "POST", "/approvals/"+args[0], body, &a)
				return a, func(w io.Writer) { fmt.Fprintf(w, "approval %d of %s: %s\n", a.ID, a.TaskID, a.Status) }, err
			},
		}.add(approval)
		cmd.Flags().StringVar(&feedback, "feedback", "", "what the person says (a revision needs it)")
		cmd.Flags().StringVar(&by, "by", decider(), "who decides, recorded with the decision")
	}
	return []*cobra.Command{project, session_, approval}
}

// decider is who runs the command: USER (USERNAME on Windows) at the
// host's name.
func decider() string {
	u := os.Getenv("USER")
	if u == "" {
		u = os.Getenv("USERNAME")
	}
	if u == "" {
		u = "operator"
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		return u + "@" + h
	}
	return u
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printProject(w io.Writer, v *session.ProjectView) {
	fmt.Fprintf(w, "project %s %q: %d/%d tasks completed (%d%%), session %s %s\n", v.ID, v.Name, v.Progress.Completed,
		v.Progress.Total, v.Progress.Percent, v.SessionID, v.Status)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tPHASE\tNAME\tAGENT\tSTATUS\tPROGRESS\tATTEMPT\tDEPENDS ON\tERROR")
	for _, t := range v.Tasks {
		st := t.Status
		if t.State != "" {
			st += " (" + t.State + ")"
		}
		deps := strings.Join(t.DependsOn, ",")
		agent := strings.TrimSpace(t.Role + " " + t.Agent)
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d%%\t%d\t%s\t%s\n", t.ID, t.Phase, t.Name, dash(agent), st, t.ProgressPercent, t.Attempt, dash(deps), dash(t.Error))
	}
	tw.Flush()
}

// listSessions lists one project's sessions, or every project's.
func listSessions(ctx context.Context, c *apiClient, args []string) ([]session.Session, error) {
	var ids []string
	if len(args) == 1 {
		if err := session.ValidateProjectID(args[0]); err != nil {
			return nil, err
		}
		ids = args
	} else {
		var ps []session.Project
		if err := c.do(ctx, "GET", "/projects", nil, &ps); err != nil {
			return nil, err
		}
		for _, p := range ps {
			ids = append(ids, p.ID)
		}
	}
	all := []session.Session{}
	for _, id := range ids {
		var ss []session.Session
		if err := c.do(ctx, "GET", "/projects/"+id+"/sessions", nil, &ss); err != nil {
			return nil, err
		}
		all = append(all, ss...)
	}
	return all, nil
}

// projectOf finds the project of a session (given, or looked up).
func projectOf(ctx context.Context, c *apiClient, projectID, sessionID string) (string, error) {
	if err := session.ValidateSessionID(sessionID); err != nil {
		return "", err
	}
	if projectID != "" {
		return projectID, session.ValidateProjectID(projectID)
	}
	ss, err := listSessions(ctx, c, nil)
	if err != nil {
		return "", err
	}
	for _, s := range ss {
		if s.ID == sessionID {
			return s.ProjectID, nil
		}
	}
	return "", fmt.Errorf("no session %s in any project", sessionID)
}
