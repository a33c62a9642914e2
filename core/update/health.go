package update

import (
	"context"
	"fmt"
	"net/http"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// DaemonHealthy returns the check Guard uses for the daemon of a data
// directory: its control API answers from pid with version, the master
// agent is running, and GET /healthz on its HTTP listener answers 200.
func DaemonHealthy(data string) func(ctx context.Context, pid int, version string) error {
	hc := &http.Client{}
	return func(ctx context.Context, pid int, version string) error {
		c, err := control.Discover(data)
		if err != nil {
			return err
		}
		defer c.Close()
		st, err := c.Status(ctx)
		if err != nil {
			return err
		}
		if st.PID != pid || st.Version != version {
			return fmt.Errorf("the control API answers from pid %d version %s", st.PID, st.Version)
		}
		master := false
		for _, a := range st.Agents {
			if a.Role == control.RoleMaster && a.State == control.StateRunning {
				master = true
			}
		}
		if !master {
			return fmt.Errorf("the master is not online")
		}
		if st.HTTP == "" {
			return nil
		}
		req, err := http.NewRequestWithContext(ctx, "GET", st.HTTP+"/healthz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/healthz: %s", resp.Status)
		}
		return nil
	}
}
