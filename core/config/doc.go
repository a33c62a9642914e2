// Package config loads the daemon's configuration file (openstarry.yaml)
// and applies the OPENSTARRY_* environment over it.
//
// Every setting is one row of Keys: its dotted name in the file, its
// environment variable, its default and its documentation. The precedence
// is flag > environment > file > default; this package does the last three
// (Load), the command line applies its flags on top (Set).
//
// Invariant: a key this package does not know is an error naming the key,
// in the file (with its line) and never silently ignored, so that a typo
// ("http.lisen") cannot leave a device on a default its operator meant to
// change.
package config
