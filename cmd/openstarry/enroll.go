package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/transport/enroll"
)

func newEnrollCmd() *cobra.Command {
	var f configFlags
	var hubURL, token, device string
	cmd := &cobra.Command{
		Use:   "enroll --hub URL --token TOKEN [--device ID] [--config FILE] [--data DIR]",
		Short: "Get this device's id and broker credentials from the hub with a one-time token",
		Long: `Enrol this device with the hub (openstarry hub serve): create the device's
ed25519 key pair (DATA/enroll/device.key, kept for later enrolments), prove it
holds it, spend the one-time token (openstarry hub token) and store the device
id and broker credentials the hub gives in DATA/enroll/credentials.json. All
are 0600 in a 0700 directory.

The daemon uses them for every mqtt.* key the configuration leaves empty:
mqtt.broker, mqtt.device, mqtt.username and mqtt.password. Enrolling again,
with a new token, rotates the password: the broker refuses the old one at
once, so restart the daemon afterwards. The hub URL must be https:// unless
it is on loopback.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if hubURL == "" || token == "" {
				return errors.New("--hub and --token are required")
			}
			cfg, err := f.load(cmd)
			if err != nil {
				return err
			}
			dir := enroll.Dir(cfg.Data)
			key, err := enroll.LoadOrCreateKey(dir)
			if err != nil {
				return err
			}
			if device == "" {
				// Re-enrolment keeps the id, unless the token names another.
				if old, err := enroll.ReadCredentials(dir); err == nil && old != nil {
					device = old.Device
				} else if cfg.MQTT.Device != "" {
					device = cfg.MQTT.Device
				}
			}
			c, err := enroll.Enroll(cmd.Context(), nil, hubURL, token, device, key)
			if err != nil {
				return exitCode(exitFailure, err)
			}
			if err := enroll.WriteCredentials(dir, c); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "enrolled as device %s on %s (user %s); credentials in %s\nrestart the daemon to use them\n",
				c.Device, c.Broker, c.Username, dir)
			return nil
		},
	}
	f.bind(cmd)
	cmd.Flags().StringVar(&hubURL, "hub", envOr("OPENSTARRY_HUB", ""), "the hub's enrolment URL, https://HOST[:PORT] (env OPENSTARRY_HUB)")
	cmd.Flags().StringVar(&token, "token", envOr("OPENSTARRY_ENROLL_TOKEN", ""), "the one-time token from openstarry hub token (env OPENSTARRY_ENROLL_TOKEN)")
	cmd.Flags().StringVar(&device, "device", "", "the device id to ask for (a token bound to an id wins); default the id enrolled before, or mqtt.device")
	return cmd
}
