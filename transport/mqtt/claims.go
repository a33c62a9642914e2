package mqtt

import (
	"errors"
	"fmt"

	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/plugin/registry"
)

// Claims makes a fleet task run on one device only (transport/fleet's
// Claims): the gate asked before a fleet task is submitted, told when its
// result is delivered. It connects once the agent's own client has, so a
// refused login is refused once.
type Claims interface {
	FleetGate
	Done(taskID string)
	Connect()
	Close()
}

// ClaimsFactory makes the claims of an agent that takes fleet tasks: the
// New of the plugin claims.fleet, which transport/fleet registers
// (RegisterClaims). An agent that would subscribe to the fleet topic
// without it is refused at start (ErrNoClaims): it would run every fleet
// task it receives, however many devices receive the same one.
type ClaimsFactory func(Config) (Claims, error)

// claimsKind declares the plugin kind claims.
var claimsKind = registry.DeclareKind(plugin.KindClaims, "mqtt.ClaimsFactory", registry.Is[ClaimsFactory])

// fleetClaims is the ID of the fleet claims in the one registry.
const fleetClaims = string(plugin.KindClaims) + ".fleet"

// ErrNoClaims is the error of an agent that would take fleet tasks in a
// binary without fleet claims.
var ErrNoClaims = errors.New("no fleet claims in this binary")

// RegisterClaims sets how the transport.mqtt plugin makes an agent's
// claims. transport/fleet calls it from its init: the claims ride on MQTT,
// so they cannot live below this package. It panics on nil or on a second
// registration, which are programming errors (as tool.Register does).
func RegisterClaims(f func(Config) (Claims, error)) {
	if f == nil {
		panic("mqtt: RegisterClaims(nil)")
	}
	if _, dup := plugin.Lookup(fleetClaims); dup {
		panic("mqtt: fleet claims registered twice")
	}
	plugin.Register(plugin.Info{ID: fleetClaims, Description: "fleet task claims: one device runs each fleet task (retained claims on the hub)",
		New: ClaimsFactory(f)})
}

// claimsFactory returns what RegisterClaims set, or ErrNoClaims.
func claimsFactory() (func(Config) (Claims, error), error) {
	info, ok := plugin.Lookup(fleetClaims)
	if !ok {
		return nil, fmt.Errorf("%w: this agent subscribes to the fleet topic but would run every fleet task it receives, "+
			"whichever device runs it too; link transport/fleet (a blank import, as cmd/openstarry/plugins.go does), "+
			"or set mqtt.no_fleet (--no-fleet, OPENSTARRY_MQTT_NO_FLEET) to leave the fleet topic alone", ErrNoClaims)
	}
	return info.New.(ClaimsFactory), nil
}
