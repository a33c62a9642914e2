// Package bbolt is the default snapshot store: one bbolt file per agent.
package bbolt
