//go:build !nosqlite

package main

import (
	_ "github.com/openstarry/openstarry-edge/storage/memory/fts"
	_ "github.com/openstarry/openstarry-edge/storage/sqlite"
)
