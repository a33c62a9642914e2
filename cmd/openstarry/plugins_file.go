//go:build !nofile

package main

import _ "github.com/openstarry/openstarry-edge/storage/file"
