// Package enroll gives a new device its identity on the hub: a device id
// and broker credentials, in exchange for a one-time token the operator
// made, through Mosquitto's own dynamic security plugin.
//
// The operator's side (Hub, `openstarry hub serve`) holds the tokens, one
// file each under STATE/tokens, and the enrolled devices under
// STATE/devices. A device (`openstarry enroll`) creates its own ed25519 key
// pair, proves it holds it, and spends a token; the hub then creates the
// device's broker client and role (its own topics and the fleet's) over
// $CONTROL/dynamic-security/v1, or, for a device enrolled before, sets a
// new password and kicks the sessions of the old one. A token is spent by
// renaming its file before the broker is touched (and put back if the
// broker fails), so two devices can never spend the same one, not even
// through two hubs sharing the state directory.
//
// Re-enrolment is the same exchange with a new token: a device with the
// key it enrolled with keeps its id and gets a new password; a device id
// whose key changed (a replaced board) needs a token bound to that id
// (`hub token --device ID`).
package enroll
