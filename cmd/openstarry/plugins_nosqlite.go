//go:build nosqlite

package main

import "github.com/openstarry/openstarry-edge/core/plugin"

func init() { plugin.Omit("storage.sqlite", "nosqlite") }
