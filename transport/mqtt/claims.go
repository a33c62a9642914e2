package mqtt

import (
	"errors"
	"fmt"
	"sync"
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

// newClaims makes the claims of an agent that takes fleet tasks; nil until
// transport/fleet registers them (RegisterClaims). An agent that would
// subscribe to the fleet topic without them is refused at start
// (ErrNoClaims): it would run every fleet task it receives, however many
// devices receive the same one.
var (
	claimsMu  sync.Mutex // guards newClaims
	newClaims func(Config) (Claims, error)
)

// ErrNoClaims is the error of an agent that would take fleet tasks in a
// binary without fleet claims.
var ErrNoClaims = errors.New("no fleet claims in this binary")

// RegisterClaims sets how the transport.mqtt plugin makes an agent's
// claims. transport/fleet calls it from its init: the claims ride on MQTT,
// so they cannot live below this package. It panics on nil or on a second
// registration, which are programming errors (as tool.Register does).
func RegisterClaims(f func(Config) (Claims, error)) {
	claimsMu.Lock()
	defer claimsMu.Unlock()
	if f == nil {
		panic("mqtt: RegisterClaims(nil)")
	}
	if newClaims != nil {
		panic("mqtt: fleet claims registered twice")
	}
	newClaims = f
}

// claimsFactory returns what RegisterClaims set, or ErrNoClaims.
func claimsFactory() (func(Config) (Claims, error), error) {
	claimsMu.Lock()
	defer claimsMu.Unlock()
	if newClaims == nil {
		return nil, fmt.Errorf("%w: this agent subscribes to the fleet topic but would run every fleet task it receives, "+
			"whichever device runs it too; link transport/fleet (a blank import, as cmd/openstarry/plugins.go does), "+
			"or set mqtt.no_fleet (--no-fleet, OPENSTARRY_MQTT_NO_FLEET) to leave the fleet topic alone", ErrNoClaims)
	}
	return newClaims, nil
}
