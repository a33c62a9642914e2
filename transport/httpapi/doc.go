// Package httpapi is the device's HTTP listener: the agents and tasks API,
// health, and (later) the session-continuity API and web UI.
//
// A task is answered 202 only after it is durable in the agent's snapshot;
// errors are JSON {"error": "...", "code": "..."} with the right status.
// Requests from off loopback need the bearer token.
package httpapi
