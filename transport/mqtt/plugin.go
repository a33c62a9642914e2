package mqtt

import "github.com/openstarry/openstarry-edge/core/plugin"

func init() {
	plugin.Register(plugin.Info{
		ID:          "transport.mqtt",
		Description: "tasks in and results out over MQTT (paho, QoS 1, persistent session, manual ack)",
		New:         plugin.TransportOpener(openTransport),
	})
}
