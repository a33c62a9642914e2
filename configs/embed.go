// Package configs holds the files shipped inside the binary: the default
// agent templates, so that a board with nothing on its disk still boots.
package configs

import "embed"

// Templates holds templates/*.json, the shipped blueprints.
//
//go:embed templates/*.json
var Templates embed.FS
