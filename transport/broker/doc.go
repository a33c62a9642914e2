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
//     in-flight QoS 1/2 messages and retained messages are kept in
//     DATA/broker.db (mochi's bbolt storage hook, every write synced) and
//     reloaded by the next Start, so a device restart does not forget a
//     persistent session or a task queued for an agent that was offline.
//     The file's lock also stops a second broker from using the same data
//     directory. Mochi acknowledges a publisher before it has stored the
//     copies it queues for subscribers, so a power cut within that instant
//     can lose a message the publisher saw acknowledged; a hub that must
//     never do so is a Mosquitto with the packaging/mosquitto/hub.conf
//     settings.
//   - A session taken over keeps what was queued for it: a message that
//     reaches a persistent session at the instant its client reconnects
//     goes to the new connection (takeoverHook), and what the old one had
//     in flight stays in broker.db until the new one acknowledges it
//     (boltHook.OnQosDropped); mochi v2.7.9 lost both.
//   - A delivery waits for its own acknowledgement: a client publishing
//     under the packet id of a message in flight to it does not make the
//     broker forget that message (takeoverHook; mochi v2.7.9 numbered both
//     directions in one map).
//   - Nothing queued is thrown away silently for time or count: messages do
//     not expire, a disconnected persistent session keeps up to 65,535
//     in-flight messages (mochi's ceiling; beyond it mochi logs "client store
//     quota reached" and drops), and session expiry is unlimited.
//   - Logging: mochi's log/slog output goes to the zerolog logger of
//     Config.Log through SlogHandler, tagged component=broker.
package broker
