// Package session owns session continuity: projects, their plans of tasks,
// the sessions that work on them, human approvals and recorded approaches.
//
// The store (Store, storage.go: a plugin of kind sessionstore, handed in
// as Options.OpenStore; storage/sessionsql keeps it in DATA/sessions.db,
// SQLite) is primary; the JSON files under DATA/projects/{project_id}/ are
// its backup. This package owns their formats (files.go: the types and
// their strict decoders) and decides what they contain and when they are
// written, read and rebuilt (persist.go); their bytes go through a Backup
// (backup.go: a plugin of kind sessionbackup, handed in as
// Options.OpenBackup; storage/sessionfiles writes them atomically —
// temporary file, fsync, rename, directory fsync — with mode 0600 in 0700
// directories). A missing sessions.db is rebuilt from the JSON files; a
// damaged JSON file is rewritten from the store. Both are logged with what
// was rebuilt. This package holds no SQL, no HTTP handler and does not
// write files: transport/sessionapi serves the Manager over HTTP.
//
// The invariant that keeps the plan and the agents from disagreeing: an
// attempt of a plan task is handed to its agent under an id unique per
// project, session and attempt (plan:{project}:{session}:{task}:{attempt},
// AgentTaskID), kept with the task while the attempt lasts. An agent drops
// a task id it has already seen and answers with that task's state, so a
// task re-sent by a restarted dispatcher, a resumed session or after a
// crash runs at most once per attempt, and an answer never stands for
// another project's task or another attempt. The agents keep the plan:
// namespace for the daemon's dispatcher (agent.PlanTaskPrefix): nobody
// else can take a plan task's id.
//
// Table names follow the specification (projects, sessions, tasks,
// human_approvals, approaches). In Go the rows of the tasks table are
// PlanTask, never to be confused with an agent's task results, which the
// snapshot stores index per agent.
package session
