package main

import (
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// oneProcessor makes the daemon and each agent process run their Go code
// on one thread at a time (GOMAXPROCS 1), unless the GOMAXPROCS environment
// variable sets it. They are processes of their own, which the kernel
// spreads over the cores; inside one, a task goes from goroutine to
// goroutine a dozen times or more (paho's reader, router and writer, the
// runtime's loop, the embedded broker's writer of each client), and with a
// second processor idle each of those hand-offs woke a second thread to
// look for work, which found none and slept again: on the 2-core
// development VM a task over MQTT cost 19–24% less processor time with one
// (docs/figures.md, "one processor per process"), and finished sooner.
func oneProcessor() {
	if n := defaultProcs(os.Getenv); n > 0 {
		runtime.GOMAXPROCS(n)
	}
}

// dropDaemonProcs takes GOMAXPROCS out of an agent's environment when the
// daemon put it there (control.EnvProcs): the runtime read it when the
// process started, and the processes the agent starts (a tool's command,
// an MCP server) get Go's default, as they would without the daemon.
func dropDaemonProcs() {
	if os.Getenv(control.EnvProcs) == "" {
		return
	}
	_ = os.Unsetenv("GOMAXPROCS")
	_ = os.Unsetenv(control.EnvProcs)
}

// defaultProcs is the GOMAXPROCS oneProcessor sets: 1, or 0 (leave the
// runtime's) when the environment sets GOMAXPROCS.
func defaultProcs(getenv func(string) string) int {
	if getenv("GOMAXPROCS") != "" {
		return 0
	}
	return 1
}

// quietSysmonSetting is the GODEBUG setting the daemon and its agents run
// with (docs/daemon.md, "The runtime's monitor thread").
//
// The Go runtime's monitor thread (sysmon) sleeps 20 µs between its rounds
// for the first millisecond after it wakes from a deep sleep because a
// goroutine made a system call, and it sleeps deeply whenever every
// processor is idle. A process of the appliance goes idle between two
// messages and makes a system call as soon as the next one comes (a read
// on its socket), so under a steady stream of tasks its monitor thread
// woke every 20 µs nearly all the time: 13% of an agent's processor time
// and 9% of the daemon's (perf record, one client over MQTT, the embedded
// broker), each wake a context switch. With a scheduler trace set, the
// runtime never lets the monitor sleep deeply, and so never starts it
// again at 20 µs: it backs off to one round every 10 ms. The trace's
// period, the largest the runtime takes (2^31-1 ms, 24.8 days), prints
// nothing unless the machine has been up longer than that, and then one
// "SCHED" line at the process's start and one every 24.8 days. The price
// is paid when idle: 100 wake-ups a second per process instead of a few.
// golang/go#18236 asks for a runtime setting of the monitor's period;
// there is none.
//
// A monitor rounding every 10 ms no longer hands an agent's one processor
// to its other goroutines while a save waits in fsync: the agent reads the
// requests that came meanwhile once the save is done, and its next save
// takes them together (core/agent's loop makes sure of that). On Linux the
// bbolt journal's sync waits in the poller anyway while tasks come in
// several at a time (storage/bbolt/aiosync_linux.go).
const quietSysmonSetting = "schedtrace=2147483647"

// withQuietSysmon returns godebug (a GODEBUG value) with
// quietSysmonSetting added, and whether it added it: not when godebug
// names schedtrace already (the operator's word, schedtrace=0 included).
func withQuietSysmon(godebug string) (string, bool) {
	for _, kv := range strings.Split(godebug, ",") {
		if k, _, _ := strings.Cut(strings.TrimSpace(kv), "="); k == "schedtrace" {
			return godebug, false
		}
	}
	if strings.TrimSpace(godebug) == "" {
		return quietSysmonSetting, true
	}
	return godebug + "," + quietSysmonSetting, true
}

// quietSysmonErr is why quietSysmon could not run the daemon again, for
// logQuietSysmon (there is no logger yet when it runs).
var quietSysmonErr error

// quietSysmon runs `openstarry start` (not --check, not --help) again with
// quietSysmonSetting in GODEBUG (the runtime reads schedtrace only when a
// process starts), by exec on Unix: the same process id, arguments and
// open files, before anything else has run; the agents inherit the
// setting. It does nothing when GODEBUG names schedtrace (the operator's
// word, which every process then inherits; the daemon run again has it) or
// on Windows (no exec: the daemon and its agents keep the runtime's
// default). main calls it on the process's first thread (see init).
func quietSysmon(args []string) {
	if !canExecSelf || !startsDaemon(args) {
		return
	}
	before, had := os.LookupEnv("GODEBUG")
	v, add := withQuietSysmon(before)
	if !add {
		return
	}
	_ = os.Setenv("GODEBUG", v)
	quietSysmonErr = execSelf()
	if had {
		_ = os.Setenv("GODEBUG", before)
	} else {
		_ = os.Unsetenv("GODEBUG")
	}
}

// startsDaemon says whether args run `openstarry start` for good: not
// with --check or --help.
func startsDaemon(args []string) bool {
	if !slices.Contains(args, "start") {
		return false // what every agent process runs (core) stops here
	}
	cmd, _, err := newRootCmd().Find(args)
	if err != nil || cmd.Name() != "start" || cmd.Parent() == nil || cmd.Parent().Parent() != nil {
		return false
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "--help" || a == "--check" || strings.HasPrefix(a, "--check=") {
			return false
		}
	}
	return true
}

// logQuietSysmon logs why quietSysmon could not run the daemon again, if
// it could not.
func logQuietSysmon(log zerolog.Logger) {
	if quietSysmonErr != nil {
		log.Warn().Err(quietSysmonErr).Msg("runtime: cannot run the daemon again with GODEBUG=" + quietSysmonSetting + "; it and its agents run with the runtime's default")
	}
}
