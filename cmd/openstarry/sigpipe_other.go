//go:build !unix

package main

// survivePipeClose: Windows has no SIGPIPE; a write to a closed pipe fails.
func survivePipeClose() {}
