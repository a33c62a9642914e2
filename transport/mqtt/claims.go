package mqtt

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
// transport/fleet registers them (RegisterClaims). An agent without them
// runs every fleet task it receives.
var newClaims func(Config) (Claims, error)

// RegisterClaims sets how the transport.mqtt plugin makes an agent's
// claims. transport/fleet calls it from its init: the claims ride on MQTT,
// so they cannot live below this package.
func RegisterClaims(f func(Config) (Claims, error)) { newClaims = f }
