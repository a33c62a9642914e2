package mqtt

import (
	"fmt"
	"os"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// DeviceID returns the configured device id (mqtt.device, --device), or
// the host name when it is empty, checked as an id.
func DeviceID(configured string) (string, error) {
	d := configured
	if d == "" {
		h, err := os.Hostname()
		if err != nil {
			return "", fmt.Errorf("--device is not set and the host name is unknown: %w", err)
		}
		d = h
	}
	if err := agent.ValidateID(d); err != nil {
		if configured == "" {
			return "", fmt.Errorf("the host name cannot be a device id, set --device: %w", err)
		}
		return "", fmt.Errorf("--device: %w", err)
	}
	return d, nil
}
