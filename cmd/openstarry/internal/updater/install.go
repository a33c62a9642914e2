package updater

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/cmd/openstarry/internal/exitcode"
	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/update"
)

// Request is what `openstarry update` asks for.
type Request struct {
	From     string        // the new binary: a file or an http(s):// URL
	Wait     time.Duration // for the outcome with a running daemon; 0: trial_timeout × max_boots + 1m
	Rollback bool          // install it even if it is older than the running version
}

// Install verifies the binary of r and installs it: at once when no daemon
// runs on cfg's data directory, else through the daemon (it restarts into
// it on trial), waiting for the outcome. What it does is printed on out.
func Install(ctx context.Context, out io.Writer, cfg *config.Config, self update.Info, r Request, log zerolog.Logger) error {
	from, wait, rollback := r.From, r.Wait, r.Rollback
	m, err := NewManager(cfg, self, log)
	if err != nil {
		return err
	}
	if !strings.Contains(from, "://") {
		if abs, err := filepath.Abs(from); err == nil {
			from = abs
		}
	}
	// The version the update replaces: the running daemon's, else the
	// binary installed in the slot (what the next start runs), else this
	// one's.
	pid, running := runningDaemon(ctx, cfg.Data)
	if pid != 0 {
		m.Running = running
	} else if _, err := os.Stat(m.Paths.Slot); err == nil {
		if info, err := update.Probe(ctx, m.Paths.Slot); err == nil {
			m.Running = info.Version
		}
	}
	j, err := m.Stage(ctx, from, "", rollback)
	if err != nil {
		return exitcode.New(exitcode.Failure, err)
	}
	fmt.Fprintf(out, "verified %s: version %s, sha256 %s, signed by a trusted fleet key\n", from, j.To, j.ToSHA)
	if pid == 0 {
		if err := m.Apply(j); err != nil {
			return exitcode.New(exitcode.Failure, err)
		}
		fmt.Fprintf(out, "installed %s as %s (%s kept as %s); no daemon runs on %s: the next start runs it on trial\n",
			j.To, m.Paths.Slot, j.From, m.Paths.Prev, cfg.Data)
		return nil
	}
	if err := m.Write(j); err != nil {
		return err
	}
	if err := signalApply(pid); err != nil {
		return fmt.Errorf("update: ask the daemon (pid %d) to install it: %w", pid, err)
	}
	fmt.Fprintf(out, "staged; the daemon (pid %d) installs it and restarts on trial\n", pid)
	if wait <= 0 {
		wait = cfg.Update.TrialTimeout*time.Duration(cfg.Update.MaxBoots) + time.Minute
	}
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		cur, err := m.Journal()
		if err == nil && cur != nil && cur.Started.Equal(j.Started) && cur.Phase.Final() {
			fmt.Fprintf(out, "update %s → %s: %s", cur.From, cur.To, cur.Phase)
			if cur.Reason != "" {
				fmt.Fprintf(out, ": %s", cur.Reason)
			}
			fmt.Fprintln(out)
			if cur.Phase != update.PhaseCommitted {
				return exitcode.New(exitcode.Failure, fmt.Errorf("update %s", cur.Phase))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return exitcode.New(exitcode.Failure, fmt.Errorf("no outcome within %s; %s says where the update stands", wait, m.Paths.Journal))
}

// runningDaemon returns the pid and version of the daemon on data, 0 when
// none answers.
func runningDaemon(ctx context.Context, data string) (int, string) {
	c, err := control.Discover(data)
	if err != nil {
		return 0, ""
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.Status(ctx)
	if err != nil {
		return 0, ""
	}
	return st.PID, st.Version
}
