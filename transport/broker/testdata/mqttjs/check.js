// check.js: the MQTT 5 features OpenStarry uses, seen by a client of
// another implementation (mqtt.js). TestMQTTJS runs it against the
// embedded broker and against Mosquitto: node check.js mqtt://HOST:PORT
//
// Every packet the broker sends is printed as one JSON line ("recv"), and
// each check that fails is printed ("FAIL ...") and makes the exit status 1.
// mqtt.js itself refuses a malformed packet or a reason code that is not
// valid for its packet type (it closes the connection with an error).
'use strict';

const mqtt = require('mqtt');

const url = process.argv[2];
const run = 'r' + process.pid + '-' + Date.now();
const topic = (s) => 'mqttjs/' + run + '/' + s;
let failed = 0;

function fail(msg) {
  failed++;
  console.log('FAIL ' + msg);
}

function check(cond, msg) {
  if (!cond) fail(msg);
}

function show(who, pk) {
  const o = { who, cmd: pk.cmd };
  for (const k of ['reasonCode', 'returnCode', 'granted', 'messageId', 'qos', 'retain', 'sessionPresent', 'topic', 'properties']) {
    if (pk[k] !== undefined) o[k] = pk[k];
  }
  if (pk.payload !== undefined && pk.payload !== null) o.payload = pk.payload.toString();
  console.log('recv ' + JSON.stringify(o));
}

// connect resolves with the client and its CONNACK; every packet it
// receives is shown and kept in client.seen.
function connect(who, opts) {
  return new Promise((resolve) => {
    const c = mqtt.connect(url, Object.assign({ protocolVersion: 5, reconnectPeriod: 0, connectTimeout: 20000, keepalive: 30 }, opts));
    c.seen = [];
    c.on('packetreceive', (pk) => { c.seen.push(pk); show(who, pk); });
    c.on('error', (err) => { fail(who + ': client error: ' + err.message); finish(); });
    c.once('connect', (connack) => resolve({ c, connack }));
  });
}

// next resolves with the next message on c for which pred holds.
function next(c, pred, what) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out waiting for ' + what)), 20000);
    const on = (t, payload, pk) => {
      if (!pred(t, payload, pk)) return;
      clearTimeout(timer);
      c.removeListener('message', on);
      resolve(pk);
    };
    c.on('message', on);
  });
}

// pubacks returns the PUBACKs c received for messageId.
const pubacks = (c, id) => c.seen.filter((pk) => pk.cmd === 'puback' && pk.messageId === id);

// checkAck checks the PUBACK of a successful QoS 1 publish: reason code
// absent, 0x00 (success) or 0x10 (no matching subscribers, which
// Mosquitto answers when nobody subscribes), and no properties: the
// publish's are not echoed.
function checkAck(c, pk, what) {
  const acks = pubacks(c, pk.messageId);
  check(acks.length === 1, what + ': ' + acks.length + ' PUBACKs for message id ' + pk.messageId);
  for (const a of acks) {
    check(a.reasonCode === undefined || a.reasonCode === 0 || a.reasonCode === 0x10, what + ': PUBACK reason code ' + a.reasonCode + ', want 0 (success) or 0x10 (no matching subscribers)');
    check(!a.properties || Object.keys(a.properties).length === 0,
      what + ': PUBACK carries properties ' + JSON.stringify(a.properties) + ' (the publish\'s properties echoed)');
  }
}

const userProps = { origin: 'mqttjs', task: 't-1' };

async function main() {
  // A subscriber with a persistent session (session expiry), a plain and a
  // shared subscription.
  const subID = 'mqttjs-sub-' + run;
  let { c: sub, connack } = await connect('sub', { clientId: subID, clean: true, properties: { sessionExpiryInterval: 3600 } });
  check(connack.reasonCode === 0, 'sub: CONNACK reason code ' + connack.reasonCode);
  check(connack.sessionPresent === false, 'sub: CONNACK of a new session says session present');
  const granted = await sub.subscribeAsync({ [topic('direct')]: { qos: 1 }, ['$share/g/' + topic('fleet')]: { qos: 1 } });
  check(granted.length === 2 && granted.every((g) => g.qos === 1), 'sub: SUBACK granted ' + JSON.stringify(granted));

  // A publisher: QoS 1 with properties, to both subscriptions.
  const { c: pub } = await connect('pub', { clientId: 'mqttjs-pub-' + run, clean: true });
  const props = { userProperties: userProps, contentType: 'application/json', payloadFormatIndicator: true };
  for (const t of ['direct', 'fleet']) {
    const got = next(sub, (tt) => tt === topic(t), t + ' message');
    const pk = await pub.publishAsync(topic(t), '{"n":1}', { qos: 1, properties: props });
    checkAck(pub, pk, 'publish ' + t);
    const m = await got;
    check(m.qos === 1, t + ': delivered at QoS ' + m.qos);
    check(JSON.stringify(m.properties && m.properties.userProperties) === JSON.stringify(userProps),
      t + ': user properties ' + JSON.stringify(m.properties && m.properties.userProperties));
    check(m.properties && m.properties.contentType === 'application/json', t + ': content type lost');
  }

  // A retained message with properties reaches a later subscriber flagged
  // retained.
  const rpk = await pub.publishAsync(topic('status'), '{"state":"online"}', { qos: 1, retain: true, properties: { userProperties: userProps } });
  checkAck(pub, rpk, 'retained publish');
  const { c: late } = await connect('late', { clientId: 'mqttjs-late-' + run, clean: true });
  const got = next(late, (t) => t === topic('status'), 'retained message');
  await late.subscribeAsync(topic('status'), { qos: 1 });
  const r = await got;
  check(r.retain === true, 'retained: delivered without the retain flag');
  check(JSON.stringify(r.properties && r.properties.userProperties) === JSON.stringify(userProps), 'retained: user properties lost');
  // Clearing it (empty retained payload) is acknowledged too.
  const cpk = await pub.publishAsync(topic('status'), '', { qos: 1, retain: true });
  checkAck(pub, cpk, 'clearing a retained message');

  // A will with properties, sent when its client's connection drops.
  const willGot = next(sub, (t) => t === topic('will'), 'will message');
  await sub.subscribeAsync(topic('will'), { qos: 1 });
  const { c: w } = await connect('will', {
    clientId: 'mqttjs-will-' + run, clean: true,
    will: { topic: topic('will'), payload: Buffer.from('{"state":"offline"}'), qos: 1, retain: false, properties: { userProperties: userProps } },
  });
  w.stream.destroy();
  const wm = await willGot;
  check(wm.payload.toString() === '{"state":"offline"}', 'will: payload ' + wm.payload.toString());
  check(JSON.stringify(wm.properties && wm.properties.userProperties) === JSON.stringify(userProps), 'will: user properties lost');

  // UNSUBSCRIBE (an agent leaving the fleet group): UNSUBACK success.
  const unsub = await late.unsubscribeAsync(topic('status'));
  const unsuback = late.seen.filter((pk) => pk.cmd === 'unsuback').pop();
  check(unsuback !== undefined, 'unsubscribe: no UNSUBACK');
  if (unsuback) {
    // mqtt.js puts an UNSUBACK's reason codes in granted.
    const codes = unsuback.granted || [];
    check(codes.length === 1 && codes[0] === 0, 'unsubscribe: UNSUBACK reason codes ' + JSON.stringify(codes) + ', want [0] (success)');
  }
  void unsub;

  // A second connection with the same client id takes the session over:
  // the first connection is closed, after a DISCONNECT 0x8E (session taken
  // over) if the broker sends one ([MQTT-3.1.4-3]; Mosquitto 2.0 does not).
  const takeID = 'mqttjs-take-' + run;
  const { c: first } = await connect('first', { clientId: takeID, clean: false, properties: { sessionExpiryInterval: 60 } });
  first.removeAllListeners('error');
  first.on('error', () => {});
  const closed = new Promise((resolve) => first.once('close', () => resolve(true)));
  const { c: second, connack: c2 } = await connect('second', { clientId: takeID, clean: false, properties: { sessionExpiryInterval: 60 } });
  check(c2.sessionPresent === true, 'takeover: CONNACK says no session present');
  const wasClosed = await Promise.race([closed, new Promise((resolve) => setTimeout(() => resolve(false), 20000))]);
  check(wasClosed, 'takeover: the first connection is still open');
  for (const d of first.seen.filter((pk) => pk.cmd === 'disconnect')) {
    check(d.reasonCode === 0x8e, 'takeover: DISCONNECT reason code ' + d.reasonCode + ', want 0x8e (session taken over)');
  }
  first.end(true);
  await second.endAsync(false, { properties: { sessionExpiryInterval: 0 } });

  // The persistent session keeps a message published while it is away.
  await sub.endAsync();
  const qpk = await pub.publishAsync(topic('direct'), '{"n":2}', { qos: 1, properties: { userProperties: userProps } });
  checkAck(pub, qpk, 'publish to an offline session');
  const back = mqtt.connect(url, { protocolVersion: 5, reconnectPeriod: 0, clientId: subID, clean: false, properties: { sessionExpiryInterval: 3600 } });
  back.seen = [];
  back.on('packetreceive', (pk) => { back.seen.push(pk); show('sub-again', pk); });
  back.on('error', (err) => { fail('sub-again: client error: ' + err.message); finish(); });
  const queued = next(back, (t, p) => t === topic('direct') && p.toString() === '{"n":2}', 'queued message');
  connack = await new Promise((resolve) => back.once('connect', resolve));
  check(connack.sessionPresent === true, 'sub-again: CONNACK says no session present');
  const q = await queued;
  check(JSON.stringify(q.properties && q.properties.userProperties) === JSON.stringify(userProps), 'queued: user properties lost');
  // End the session (expiry 0 on disconnect), so that the broker forgets it.
  await back.endAsync(false, { properties: { sessionExpiryInterval: 0 } });
  await Promise.all([pub.endAsync(), late.endAsync()]);
}

// finish exits: 0 when every check held. A client error (mqtt.js refused
// a packet and closed the connection) finishes at once.
function finish() {
  console.log(failed === 0 ? 'ok' : failed + ' checks failed');
  process.exit(failed === 0 ? 0 : 1);
}

main().then(finish, (err) => {
  fail(err.message);
  finish();
});
