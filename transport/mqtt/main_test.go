package mqtt

import (
	"os"
	"testing"

	"github.com/openstarry/openstarry-edge/internal/portguard"
)

// TestMain fails the package's tests if any dials 127.0.0.1:1883 or :7777,
// where a user's `make run` listens (internal/portguard).
func TestMain(m *testing.M) { os.Exit(portguard.Run(m)) }
