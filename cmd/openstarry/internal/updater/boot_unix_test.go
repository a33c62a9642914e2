//go:build unix

package updater

import (
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/core/update"
)

// TestBootRole: a daemon its guard started on trial (OPENSTARRY_UPDATE_ROLE
// =trial) boots in this process and says it is on trial, and the variable
// does not reach what it starts; without it and with no update installed,
// the daemon boots as it is, not on trial.
func TestBootRole(t *testing.T) {
	cfg := config.Default()
	cfg.Data = t.TempDir()
	self := update.Info{Version: "1.0.0"}

	t.Setenv(update.EnvRole, update.RoleTrial)
	handled, trial, err := Boot(cfg, self, zerolog.Nop())
	if handled || !trial || err != nil {
		t.Errorf("on trial: handled %v, trial %v, err %v; want false, true, nil", handled, trial, err)
	}
	if v, ok := os.LookupEnv(update.EnvRole); ok {
		t.Errorf("%s=%s is still in the environment", update.EnvRole, v)
	}

	handled, trial, err = Boot(cfg, self, zerolog.Nop())
	if handled || trial || err != nil {
		t.Errorf("no update: handled %v, trial %v, err %v; want false, false, nil", handled, trial, err)
	}
}
