//go:build nofile

package main

import "github.com/openstarry/openstarry-edge/core/plugin"

func init() { plugin.Omit("storage.file", "nofile") }
