// Package mqtt is the device's task transport: an MQTT 3.1.1 client of its
// own (link.go; the codec is transport/mqtt/wire) that takes tasks from a
// hub (or the embedded broker, transport/broker) into an agent's runtime and
// publishes its results, progress and status. The daemon's and the CLI's
// connections (Infra, SendTask, Dial) are paho clients.
//
// # Topics (prefix configurable, default "openstarry")
//
//	{prefix}/{device}/agents/{agent}/tasks      hub → agent   QoS 1  task JSON
//	$share/{group}/{prefix}/fleet/tasks         hub → any     QoS 1  task JSON, load-balanced
//	{prefix}/{device}/agents/{agent}/results    agent → hub   QoS 1  result JSON
//	{prefix}/{device}/agents/{agent}/progress   agent → hub   QoS 0  progress JSON
//	{prefix}/{device}/status                    device → hub  QoS 1  retained; last will "offline";
//	                                                                 the daemon's when it runs (owner.go)
//	{prefix}/{device}/deadletter                device → hub  QoS 1  a rejected message and why
//
// # Promises
//
//   - A task is acknowledged (PUBACK) only after Runtime.Submit returned
//     without error, that is once the task is durable in the agent's
//     snapshot, or was a duplicate of a task already there, or was
//     dead-lettered. The session is persistent (CleanSession false, client
//     id "openstarry-{device}-{agent}"), so a task the device never
//     acknowledged is redelivered by the broker after a crash or a
//     reconnect, and the runtime drops it if it had become durable after
//     all (same task_id): a task is never lost and never run twice.
//   - A message that is not a task (not JSON, no task_id, a bad id, a bad
//     deadline, larger than the template's limits.max_task_bytes) is
//     acknowledged, published to the dead letter topic with the reason,
//     logged, and never stops the agent.
//   - A result leaves the snapshot's outbox only after the broker
//     acknowledged its publication (Runtime.Confirm after PUBACK). Results
//     are published in the order they were produced; while the broker is
//     unreachable they wait, in the outbox and in this client, and are
//     published after the reconnection, oldest first, however long the
//     link was down. A result may be published more than once (after a
//     restart, a reconnection, or a lost PUBACK), never computed twice.
//     A result keeps its packet id until its PUBACK; after a reconnection
//     it is published again with that id and DUP, and only a PUBACK of
//     that id confirms it: a resend is never taken for a confirmation.
//   - Startup fails with one error when the broker refuses the credentials
//     or the TLS handshake fails (bad CA, bad client certificate): those do
//     not heal by retrying. An unreachable broker is not an error: the
//     client retries in the background with exponential backoff and jitter,
//     up to Config.MaxReconnectInterval, and the agent keeps working.
//   - Tasks are handed to the runtime without waiting for their save
//     (Runtime.SubmitAsync), in the order they arrive, so that one save
//     makes many of them durable (group commit) and they are queued in the
//     order they were published; each is acknowledged once the runtime says
//     it is durable. Fleet tasks, which wait for their claim first, may be
//     queued after tasks that arrived later.
//   - A device that is down keeps its share of the fleet topic (its
//     persistent session stays in the shared subscription's group). SendTask
//     makes up for it: it publishes a fleet task again every
//     SendOptions.Republish until a device's claim of it is retained on
//     FleetClaimTopic (docs/fleet.md, "A device that is down").
package mqtt
