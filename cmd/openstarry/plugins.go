package main

// The concrete plugins of this binary. Nothing else in the tree names them.
import (
	_ "github.com/openstarry/openstarry-edge/storage/bbolt"
	_ "github.com/openstarry/openstarry-edge/storage/file"
	_ "github.com/openstarry/openstarry-edge/storage/redis"
	_ "github.com/openstarry/openstarry-edge/storage/sqlite"
	_ "github.com/openstarry/openstarry-edge/transport/llm"
)
