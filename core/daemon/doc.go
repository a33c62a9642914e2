// Package daemon is the Orchestrator Daemon of seed 004: it boots the
// appliance in four phases, runs one OS process per agent, supervises them,
// and serves the control API through which the operator and the agents'
// agent_manager tool spawn, list, restart and stop agents.
//
// # Boot
//
//  1. Infrastructure: the daemon lock (DATA/run/daemon.lock), the control
//     API, the HTTP listener, the infrastructure plugins the command line
//     hands in (the embedded MQTT broker), and the state store, opened once
//     to find agents whose last snapshot was not closed cleanly (status
//     other than STOPPED). They are logged and marked for recovery, and the
//     store is closed again before any agent starts: a bbolt file is locked
//     by the process that has it open.
//  2. Design layer: Preflight of the template resolver and resolution of the
//     master's template (remote, cache, local, embedded), validated.
//  3. Master: its blueprint frozen to DATA/run/blueprints/{agent}/{name}.json
//     (atomic, 0440), `openstarry core --agent ID --template FILE` spawned,
//     and awaited until it has hydrated and listens: "master online".
//  4. Workers on demand: the workers of the previous run are restored,
//     handoffs still pending resumed, and spawn requests accepted.
//
// # Invariants
//
//   - One process per agent id: the daemon keeps one supervisor per id and
//     refuses a second; the store's own lock refuses a process started by
//     hand (it exits with code 3, which the supervisor reports).
//   - One daemon per data directory: the flock on DATA/run/daemon.lock.
//   - Children die with the daemon: Pdeathsig on Linux, and everywhere the
//     read end of a pipe on their stdin that the child watches for EOF.
//   - A blueprint is immutable for the life of a process: restarts by the
//     supervisor reuse the frozen file; `openstarry agent restart` resolves
//     it again.
//   - A worker's result reaches its requester at least once and is computed
//     once: the handoff is recorded in DATA/run/workers.json before the
//     task is handed over, the task and the worker_result task carry
//     deterministic ids, and agents drop duplicate ids.
//
// # Files, one job each
//
//   - Boot: daemon.go (Options, Daemon, Run), boot.go (the four phases,
//     one method each: bootInfrastructure, bootDesignLayer, bootMaster,
//     bootWorkers), lock.go, journal.go, scan.go.
//   - Supervision: members.go (the set of agents), spec.go (resolving and
//     freezing a blueprint, an agent's command line), supervise.go (one
//     supervisor per agent: start, backoff, crashloop), process.go (the
//     Launcher and agent processes).
//   - Worker handoff: workers.go (spawn and stop on demand), handoff.go,
//     retire.go, registry.go (DATA/run/workers.json).
//   - The HTTP edge: errors.go (the sentinels the other jobs return, and
//     httpError, the only place that turns them into a status and a code),
//     api.go (the control API), httpd.go (the HTTP listener and /healthz),
//     proxy.go (/agents/... to the agents' own APIs), status.go, metrics.go
//     (GET /metrics, written by core/metrics), sessions.go.
//
// The Prometheus exposition (the writer, the Go runtime and process
// metrics, the agents' save histogram, reading an agent's exposition back)
// is core/metrics: an agent process links that package, not this one.
//
// The daemon never imports a concrete backend or transport: the command
// line hands them in as Infrastructure and through the plugin registry.
package daemon
