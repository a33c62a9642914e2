package broker

import "github.com/openstarry/openstarry-edge/core/plugin"

func init() {
	plugin.Register(plugin.Info{
		ID:          "infra.broker",
		Description: "embedded MQTT broker (mochi-mqtt), started when no hub is configured",
	})
}
