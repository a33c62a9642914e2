//go:build !noredis

package main

import _ "github.com/openstarry/openstarry-edge/storage/redis"
