// Package systemd holds the systemd unit of the daemon, so that
// `openstarry service install` renders the same hardened unit the packages
// install.
package systemd

import _ "embed"

// Unit is openstarry.service.
//
//go:embed openstarry.service
var Unit string
