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
// # Parts, each the owner of its state
//
// Daemon (daemon.go) is a composition: run and its four phases (boot.go)
// start the parts in order and stop them in reverse. Each part owns its
// state and the lock that guards it, and reaches the others through a few
// methods only:
//
//   - bootState (boot.go, journal.go): the phases done, whether phase 4
//     is, the interrupted agents and the state store phase 1 found
//     (scan.go), the boot journal DATA/run/boot.json. lock.go holds
//     DATA/run/daemon.lock.
//   - infraSet (infra.go): the infrastructure plugins and which are up.
//   - supervisor (members.go): the process table, one member per agent
//     id; member (supervise.go) is one supervisor goroutine: start,
//     backoff, crashloop; process.go is the Launcher and agent processes.
//   - specs (spec.go): a template resolved and frozen into a blueprint,
//     and an agent's command line and environment.
//   - workers (workers.go, retire.go, registry.go): spawn and stop on
//     demand, restore at boot, retire ephemeral ones; the registry
//     DATA/run/workers.json. handoffs (handoff.go): a task to a worker and
//     its result back.
//   - controlAPI (api.go): the control API and its tokens.
//   - httpAPI (httpd.go): the HTTP listener; proxy.go passes
//     /agents/... to the agents' own APIs.
//   - reporter (status.go, metrics.go): status, /healthz and GET /metrics
//     (written by core/metrics), read from the parts; it owns nothing.
//   - errors.go: the sentinels the parts return, and httpError, the only
//     place that turns them into a status and a code.
//   - sessions.go: the link to session continuity (sessions.db, the
//     seed-003 routes, the agents' session tools).
//
// The Prometheus exposition (the writer, the Go runtime and process
// metrics, the agents' save histogram, reading an agent's exposition back)
// is core/metrics: an agent process links that package, not this one.
//
// The daemon never imports a concrete backend or transport: the command
// line hands them in as Infrastructure and through the plugin registry.
package daemon
