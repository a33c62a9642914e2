package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// mqttFlags configure the MQTT client of task send and the fleet
// commands; their flags are those of the mqtt.* keys.
type mqttFlags struct {
	broker   string
	device   string
	username string
	password string
	ca       string
	cert     string
	key      string
	prefix   string
}

// bindClient adds the flags every MQTT client needs.
func (f *mqttFlags) bindClient(fl *pflag.FlagSet, brokerHelp string) {
	bindKeyString(fl, &f.broker, "mqtt.broker", brokerHelp)
	bindKeyString(fl, &f.device, "mqtt.device", "")
	bindKeyString(fl, &f.username, "mqtt.username", "")
	bindKeyString(fl, &f.password, "mqtt.password", "MQTT password; prefer the environment, a flag shows in ps")
	bindKeyString(fl, &f.ca, "mqtt.ca", "")
	bindKeyString(fl, &f.cert, "mqtt.cert", "")
	bindKeyString(fl, &f.key, "mqtt.key", "")
	bindKeyString(fl, &f.prefix, "mqtt.topic_prefix", "")
}

// deviceID returns the --device value or the host name.
func (f *mqttFlags) deviceID() (string, error) { return mqtt.DeviceID(f.device) }

// mqttHint adds to a refused connection the flags that fix it.
func mqttHint(err error) error {
	switch {
	case errors.Is(err, mqtt.ErrBadCredentials), errors.Is(err, mqtt.ErrNotAuthorized):
		return fmt.Errorf("%w; check --mqtt-username and --mqtt-password (OPENSTARRY_MQTT_USERNAME, OPENSTARRY_MQTT_PASSWORD)", err)
	case errors.Is(err, mqtt.ErrTLS):
		return fmt.Errorf("%w; check --mqtt-ca, --mqtt-cert and --mqtt-key (OPENSTARRY_MQTT_CA, _CERT, _KEY)", err)
	}
	return err
}
