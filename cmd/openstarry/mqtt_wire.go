package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/openstarry/openstarry-edge/core/config"
	"github.com/openstarry/openstarry-edge/transport/broker"
	"github.com/openstarry/openstarry-edge/transport/mqtt"
)

// mqttFlags configure the MQTT client of run (and the broker it may embed)
// and of task send.
type mqttFlags struct {
	broker       string
	brokerListen string
	brokerUsers  string
	device       string
	username     string
	password     string
	ca           string
	cert         string
	key          string
	prefix       string
	fleetGroup   string
	noFleet      bool
	noMQTT       bool
}

// bindClient adds the flags every MQTT client needs.
func (f *mqttFlags) bindClient(fl *pflag.FlagSet, brokerHelp string) {
	fl.StringVar(&f.broker, "broker", envOr("OPENSTARRY_BROKER", ""), brokerHelp+" (env OPENSTARRY_BROKER)")
	fl.StringVar(&f.device, "device", envOr("OPENSTARRY_DEVICE", ""), "device id in the topics; default the host name (env OPENSTARRY_DEVICE)")
	fl.StringVar(&f.username, "mqtt-username", envOr("OPENSTARRY_MQTT_USERNAME", ""), "MQTT user name (env OPENSTARRY_MQTT_USERNAME)")
	fl.StringVar(&f.password, "mqtt-password", envOr("OPENSTARRY_MQTT_PASSWORD", ""), "MQTT password; prefer the environment, a flag shows in ps (env OPENSTARRY_MQTT_PASSWORD)")
	fl.StringVar(&f.ca, "mqtt-ca", envOr("OPENSTARRY_MQTT_CA", ""), "PEM file of the CA that signed the broker's certificate; default the system roots (env OPENSTARRY_MQTT_CA)")
	fl.StringVar(&f.cert, "mqtt-cert", envOr("OPENSTARRY_MQTT_CERT", ""), "PEM client certificate for TLS (env OPENSTARRY_MQTT_CERT)")
	fl.StringVar(&f.key, "mqtt-key", envOr("OPENSTARRY_MQTT_KEY", ""), "PEM key of --mqtt-cert (env OPENSTARRY_MQTT_KEY)")
	fl.StringVar(&f.prefix, "topic-prefix", envOr("OPENSTARRY_MQTT_TOPIC_PREFIX", mqtt.DefaultTopicPrefix), "first level of every topic (env OPENSTARRY_MQTT_TOPIC_PREFIX)")
}

// bind adds the flags of run.
func (f *mqttFlags) bind(fl *pflag.FlagSet) {
	f.bindClient(fl, "hub broker URL: tcp://, mqtt://, ssl://, mqtts:// HOST[:PORT]; empty starts the embedded broker")
	fl.StringVar(&f.brokerListen, "broker-listen", envOr("OPENSTARRY_BROKER_LISTEN", ""), "address of the embedded broker (when --broker is empty); default "+broker.DefaultListen+", and if that is taken, the broker already listening there is used (env OPENSTARRY_BROKER_LISTEN)")
	fl.StringVar(&f.brokerUsers, "broker-users", envOr("OPENSTARRY_BROKER_USERS", ""), "JSON users file of the embedded broker (hashed passwords, device ACLs); without it only loopback clients can connect (env OPENSTARRY_BROKER_USERS)")
	fl.StringVar(&f.fleetGroup, "fleet-group", envOr("OPENSTARRY_MQTT_FLEET_GROUP", mqtt.DefaultFleetGroup), "shared-subscription group of the fleet task topic (env OPENSTARRY_MQTT_FLEET_GROUP)")
	fl.BoolVar(&f.noFleet, "no-fleet", envBool("OPENSTARRY_MQTT_NO_FLEET"), "do not take tasks from the fleet topic (env OPENSTARRY_MQTT_NO_FLEET)")
	fl.BoolVar(&f.noMQTT, "no-mqtt", envBool("OPENSTARRY_NO_MQTT"), "no MQTT at all: neither the embedded broker nor a client (env OPENSTARRY_NO_MQTT)")
}

func envBool(key string) bool {
	b, err := strconv.ParseBool(os.Getenv(key))
	return err == nil && b
}

// deviceID returns the --device value or the host name.
func (f *mqttFlags) deviceID() (string, error) { return mqtt.DeviceID(f.device) }

// config returns the flags as the mqtt.* settings.
func (f *mqttFlags) config() config.MQTT {
	c := config.Default().MQTT
	c.Disabled, c.Broker, c.BrokerListen, c.BrokerUsers = f.noMQTT, f.broker, f.brokerListen, f.brokerUsers
	c.Device, c.TopicPrefix, c.FleetGroup, c.NoFleet = f.device, f.prefix, f.fleetGroup, f.noFleet
	c.Username, c.Password, c.CA, c.Cert, c.Key = f.username, f.password, f.ca, f.cert, f.key
	return c
}

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
