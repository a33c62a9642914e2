// Package design is the Design Layer: agent blueprints (templates), their
// decoding and validation, and where they come from.
//
// A template is frozen when an agent starts: the host reads it once, records
// its name, version and digest in the agent's working variables, and never
// re-reads it while the process lives.
package design
