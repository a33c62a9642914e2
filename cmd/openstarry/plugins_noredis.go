//go:build noredis

package main

import "github.com/openstarry/openstarry-edge/core/plugin"

func init() {
	plugin.Omit("storage.redis", "noredis")
	plugin.Omit("storage.rediss", "noredis")
}
