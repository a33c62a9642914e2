package main

import "errors"

// canExecSelf: Windows has no exec; the daemon keeps the runtime's default
// (quietSysmon).
const canExecSelf = false

func execSelf() error { return errors.New("no exec on Windows") }
