// Package broker is the embedded MQTT broker (mochi-mqtt/server/v2) that an
// OpenStarry device runs when no hub is configured, so that the appliance
// takes tasks over MQTT out of the box. A real hub (Mosquitto, EMQX)
// replaces it by configuration; nothing else changes, because the agents
// talk to either through the same paho client (transport/mqtt).
//
// # Promises
//
//   - Listening: on Config.Listen, 127.0.0.1:1883 by default. Start returns
//     only once the listener is bound, and logs the bound address (a port of
//     0 picks a free one) as "embedded broker listening on HOST:PORT".
//   - Who may connect: a client without a user name only from a loopback
//     address (the device's own processes); anyone else must present a user
//     name and password from Config.Users. Passwords are stored hashed,
//     never in clear (see ParsePasswordHash for the formats, which include
//     mosquitto_passwd's, so one password file can serve both brokers).
//   - What a user may touch: a device user publishes and subscribes only
//     under {prefix}/{its device}/ and may subscribe to the fleet task topic
//     {prefix}/fleet/tasks (plain or as $share/{group}/…); a hub user and an
//     anonymous loopback client may use every topic.
//   - Persistence: with Config.DataDir set, sessions, subscriptions,
//     retained messages and queued QoS 1/2 messages are kept in
//     DATA/broker.db (mochi's bbolt storage hook, every write synced) and
//     reloaded by the next Start, so a device restart does not forget a
//     persistent session or a task queued for an agent that was offline.
//     The file's lock also stops a second broker from using the same data
//     directory.
//   - One durable copy (gate.go): a QoS 1 message is acknowledged to its
//     publisher only once every persistent session it was routed to has
//     acknowledged it (an agent does so once its store holds the task), or,
//     after Config.AckHold (200ms by default) or at once for an offline
//     session, once the broker has stored the copies not acknowledged. A
//     message whose PUBACK its publisher received therefore survives a
//     crash of the broker, and in the common case the broker writes nothing
//     for it. Copies for clean sessions, which end with the broker anyway,
//     and the broker's own acknowledgement records are never stored; $SYS
//     figures are not kept across restarts.
//   - Fewer writes per task (gate.go): a PUBACK that a subscriber's
//     acknowledgement releases goes out with the next packets to its
//     publisher (a task's PUBACK with the result the agent published in the
//     same write), and the PUBACK of an agent's result (a QoS 1 message on
//     {prefix}/{device}/agents/{agent}/results) waits for the next packet to
//     the agent, at most ResultAckDelay (10ms) and while fewer than maxLater
//     (128) wait; any other publisher is acknowledged as soon as its message
//     is routed.
//   - A session taken over keeps what was queued for it: a message that
//     reaches a persistent session at the instant its client reconnects
//     goes to the new connection (takeoverHook), and what the old one had
//     in flight stays in broker.db and in the acknowledgement gate until
//     the new one acknowledges it (boltHook.OnQosDropped); mochi v2.7.9
//     lost both.
//   - A delivery waits for its own acknowledgement: a client publishing
//     under the packet id of a message in flight to it does not make the
//     broker forget that message (takeoverHook; mochi v2.7.9 numbered both
//     directions in one map).
//   - Nothing queued is thrown away silently for time or count: messages do
//     not expire, a disconnected persistent session keeps up to 65,535
//     in-flight messages (mochi's ceiling; beyond it mochi logs "client store
//     quota reached" and drops), and session expiry is unlimited.
//   - Bounds (limits.go): a packet larger than Config.MaxPacketBytes (1 MiB)
//     is refused once its length is read, before its body, and its client
//     disconnected; a CONNECT larger than MaxConnectBytes (64 KiB) likewise,
//     before anyone is authenticated; a connection that sends no CONNECT
//     within Config.ConnectTimeout (10s) is closed; beyond
//     Config.MaxConnections (256) open connections a new one is closed at
//     once, an eighth of them kept for loopback clients; the retained
//     messages hold at most Config.MaxRetainedBytes (64 MiB), a retained
//     publish beyond it dropped (PUBACK 0x97 to an MQTT 5 QoS 1
//     publisher). Each refusal is logged at warn level. An accept error
//     other than a closed listener is retried (mochi stopped accepting).
//     Close does not wait for connections that sent no CONNECT (mochi's
//     Close waited for them), and takes those accepted an instant before
//     it without racing mochi's WaitGroup of clients.
//   - MQTT 5: a QoS 1 PUBLISH is answered PUBACK 0x00 without the
//     publish's properties (mochi v2.7.9 sent 0x01 and echoed them).
//   - Logging: mochi's log/slog output goes to the zerolog logger of
//     Config.Log through SlogHandler, tagged component=broker.
package broker
