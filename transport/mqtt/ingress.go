package mqtt

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// CodeClaimedElsewhere is the dead letter code of a fleet task another
// device runs.
const CodeClaimedElsewhere = "claimed_elsewhere"

// maxDeadLetterPayload bounds the copy of a rejected payload in a dead
// letter.
const maxDeadLetterPayload = 4 << 10

// onTask runs on the reader's goroutine for every message on a task topic,
// in order. It decodes the message there and hands the task to the runtime
// without waiting for it (Runtime.SubmitAsync): the runtime answers once the
// task is durable, and the publisher goroutine (publishLoop) then
// acknowledges it.
// Tasks are thus queued in the order they came, and a burst of them shares
// one save (group commit) with no goroutine per task. onTask blocks only when
// MaxPendingSubmits tasks are on their way to durability (backpressure).
// What may wait on the broker (a fleet claim, the publication of a dead
// letter) runs on a goroutine of its own: the reader must never wait for
// the broker, whose answers it reads.
func (c *Client) onTask(m *inMsg) {
	c.received.Add(1)
	select {
	case c.sem <- struct{}{}:
	default:
		// Backpressure: the broker's packets wait in the socket meanwhile
		// (ping does not take its silence for a dead connection).
		c.blocked.Store(true)
		got := false
		select {
		case c.sem <- struct{}{}:
			got = true
		case <-c.ctx.Done():
		}
		c.lastIn.Store(time.Now().UnixNano())
		c.blocked.Store(false)
		if !got {
			return // not acknowledged: redelivered to the next session
		}
	}
	if c.cfg.FleetGate != nil && m.Topic() == c.topics.Fleet {
		go c.take(m, true)
		return
	}
	c.take(m, false)
}

// take decodes one message and submits or rejects it; own says it runs on
// a goroutine of its own (else on the reader's).
func (c *Client) take(m *inMsg, own bool) {
	rejectIt := func(err error) {
		if own {
			c.reject(m, err)
		} else {
			go c.reject(m, err)
		}
	}
	if len(m.Payload()) == 0 {
		// A zero-length message clears a retained one (this client's own
		// clearing of a retained bad message comes back this way): no task.
		<-c.sem
		c.log.Debug().Str("topic", m.Topic()).Msg("mqtt: empty message (a retained message cleared) acknowledged")
		m.Ack()
		return
	}
	task, err := agent.DecodeTask(m.Payload(), c.cfg.MaxTaskBytes)
	if err != nil {
		rejectIt(err)
		return
	}
	if own {
		owner, mine, err := c.claim(task.TaskID)
		switch {
		case err != nil: // the client is closing
			<-c.sem
			return // not acknowledged: the broker delivers it to the next session
		case !mine:
			c.reject(m, &agent.TaskError{Code: CodeClaimedElsewhere,
				Msg: fmt.Sprintf("fleet task %s is claimed by device %s, which runs it", task.TaskID, owner)})
			return
		}
	}
	ev, err := agent.TaskEvent(task, "mqtt", c.cfg.Now().UnixMilli())
	if err != nil {
		rejectIt(&agent.TaskError{Code: agent.CodeBadJSON, Msg: err.Error()})
		return
	}
	c.submit(&taken{m: m, ev: ev})
}

// claim asks the fleet gate who runs a fleet task, again and again (1 s
// doubling to the reconnection interval) until it answers or the client
// closes: a broker does not deliver a message again on a live connection
// (MQTT 3.1.1), so a task left unacknowledged after a failed claim would
// never run while the agent lives.
func (c *Client) claim(taskID string) (owner string, mine bool, err error) {
	bo := c.backoff()
	for n := 0; ; n++ {
		owner, mine, err = c.cfg.FleetGate.Claim(c.ctx, taskID)
		if err == nil || c.ctx.Err() != nil {
			return owner, mine, err
		}
		d := bo.Delay(n)
		c.log.Warn().Err(err).Str("task", taskID).Int("attempt", n+1).Dur("next_in", d).
			Msg("mqtt: fleet task not claimed yet; claiming it again")
		if !c.sleep(d) {
			return "", false, c.ctx.Err()
		}
	}
}

// taken is one task on its way to durability, then to its acknowledgement.
type taken struct {
	m    *inMsg
	ev   agent.Event
	res  agent.SubmitResult
	wait time.Duration // the last wait after a full queue
}

// submit hands a task to the runtime; the runtime's answer goes to the
// publisher, which never makes the runtime wait.
func (c *Client) submit(t *taken) {
	c.rt.SubmitAsync(c.ctx, t.ev, func(res agent.SubmitResult) {
		t.res = res
		c.ackMu.Lock()
		c.acks = append(c.acks, t)
		c.ackMu.Unlock()
		c.nudge()
	})
}

// settle settles the runtime's answer for a task, on the publisher's
// goroutine; it reports whether the task is to be acknowledged now (it is
// durable, or a duplicate), which the publisher does in its next write. A
// full queue is waited out with the message unacknowledged (the broker
// holds back what follows); any other failure leaves it unacknowledged for
// the broker to redeliver to the next session.
func (c *Client) settle(t *taken) bool {
	m, ev, res := t.m, t.ev, t.res
	switch {
	case res.Err == nil:
		if res.Duplicate {
			c.duplicates.Add(1)
			c.log.Info().Str("task", ev.ID).Str("topic", m.Topic()).Str("state", res.State.Status).
				Msg("mqtt: duplicate task acknowledged, not run again")
			c.republish(res.State)
		} else {
			c.accepted.Add(1)
			c.log.Debug().Str("task", ev.ID).Str("topic", m.Topic()).Msg("mqtt: task durable, acknowledged")
		}
		<-c.sem
		return true
	case errors.Is(res.Err, agent.ErrQueueFull) && c.ctx.Err() == nil:
		now := time.Now().Unix()
		if last := c.queueFullLogged.Load(); now-last >= 10 && c.queueFullLogged.CompareAndSwap(last, now) {
			c.log.Warn().Err(res.Err).Msg("mqtt: the agent's queue is full; tasks stay unacknowledged at the broker until it drains")
		}
		t.wait = min(max(2*t.wait, 20*time.Millisecond), 2*time.Second)
		time.AfterFunc(t.wait, func() {
			if c.ctx.Err() != nil {
				<-c.sem
				return
			}
			c.submit(t)
		})
	case c.ctx.Err() != nil:
		<-c.sem
	default:
		c.log.Warn().Err(res.Err).Str("task", ev.ID).
			Msg("mqtt: task not durable, not acknowledged; the broker redelivers it to the next session")
		<-c.sem
	}
	return false
}

// republish publishes the known result of a duplicate task again, so that
// a hub that lost it, or a sender waiting for it, gets it without the task
// running twice. Tasks still queued or running publish theirs when they end.
func (c *Client) republish(st agent.TaskState) {
	switch st.Status {
	case agent.ResultDone, agent.ResultFailed, agent.ResultUnknownOutcome:
	default:
		return
	}
	agentID := st.AgentID
	if agentID == "" {
		agentID = c.cfg.Agent
	}
	body, err := json.Marshal(resultMsg{TaskID: st.TaskID, AgentID: agentID, Status: st.Status, Output: st.Output,
		Error: st.Error, TickIndex: st.TickIndex})
	if err == nil {
		c.publish(c.topics.Results, false, body) // not waited for: a copy
	}
}

// deadLetter is the payload of the dead letter topic.
type deadLetter struct {
	Reason          string `json:"reason"`
	Code            string `json:"code"`
	Topic           string `json:"topic"`
	Payload         string `json:"payload"`
	PayloadEncoding string `json:"payload_encoding"` // utf-8 or base64
	PayloadBytes    int    `json:"payload_bytes"`    // size of the whole original payload
	Truncated       bool   `json:"truncated,omitempty"`
	Device          string `json:"device"`
	Agent           string `json:"agent"`
	Time            string `json:"time"` // RFC 3339
}

// reject publishes a message that is not a task to the dead letter topic
// and acknowledges it. A retained one is dead-lettered once (its digest is
// remembered in Config.StateDir) and its retained copy cleared.
func (c *Client) reject(m *inMsg, err error) {
	defer func() { <-c.sem }()
	code := agent.CodeBadJSON
	var te *agent.TaskError
	if errors.As(err, &te) {
		code = te.Code
	}
	var digest string
	if m.Retained() {
		// The broker hands a retained message again at every subscription:
		// dead-letter it once, then clear the retained copy.
		digest = retainedDigest(m.Topic(), m.Payload())
		seen, err := c.rejected.seen(digest)
		if err != nil {
			c.log.Warn().Err(err).Msg("mqtt: the list of dead-lettered retained messages is unreadable; starting a new one")
		}
		if seen {
			// Its copy was cleared when it was dead-lettered; that it is
			// here again means the broker kept it (an ACL that refuses the
			// device a write on its task topic; Mosquitto then also drops
			// the connection): clearing it again would only loop.
			c.log.Info().Str("topic", m.Topic()).Str("digest", digest[:16]).
				Msg("mqtt: retained message dead-lettered before; acknowledged, not dead-lettered again (the broker keeps its retained copy: clear it at the hub)")
			m.Ack()
			return
		}
	}
	p := m.Payload()
	dl := deadLetter{Reason: err.Error(), Code: code, Topic: m.Topic(), PayloadBytes: len(p),
		Device: c.cfg.Device, Agent: c.cfg.Agent, Time: c.cfg.Now().UTC().Format(time.RFC3339)}
	if len(p) > maxDeadLetterPayload {
		p, dl.Truncated = p[:maxDeadLetterPayload], true
	}
	if utf8.Valid(p) || dl.Truncated && utf8.Valid(trimPartialRune(p)) {
		dl.Payload, dl.PayloadEncoding = string(trimPartialRune(p)), "utf-8"
	} else {
		dl.Payload, dl.PayloadEncoding = base64.StdEncoding.EncodeToString(p), "base64"
	}
	c.deadLettered.Add(1)
	c.log.Warn().Str("code", code).Str("topic", m.Topic()).Int("bytes", len(m.Payload())).Str("reason", dl.Reason).
		Msgf("mqtt: message rejected to %s", c.topics.DeadLetter)
	body, _ := json.Marshal(dl)
	if err := c.publish(c.topics.DeadLetter, false, body).Wait(c.ctx, c.cfg.PublishTimeout); err != nil {
		c.log.Warn().Err(err).Msg("mqtt: publishing a dead letter failed; the message is acknowledged anyway")
	}
	if digest != "" {
		if err := c.rejected.add(digest); err != nil {
			c.log.Warn().Err(err).Msg("mqtt: could not remember a dead-lettered retained message; it may be dead-lettered again after a restart")
		}
		m.Ack()
		c.clearRetained(m.Topic())
		return
	}
	m.Ack()
}

// clearRetained publishes an empty retained message to topic, which makes
// the broker drop its retained copy. A broker whose ACL refuses it keeps
// the copy; the digest remembered in StateDir still keeps it from being
// dead-lettered twice.
func (c *Client) clearRetained(topic string) {
	if err := c.publish(topic, true, []byte{}).Wait(c.ctx, c.cfg.PublishTimeout); err != nil {
		c.log.Warn().Err(err).Str("topic", topic).Msg("mqtt: clearing a retained bad message failed")
		return
	}
	c.log.Info().Str("topic", topic).Msg("mqtt: retained bad message cleared")
}

// trimPartialRune drops a rune cut in two at the end of p.
func trimPartialRune(p []byte) []byte {
	for i := 0; i < utf8.UTFMax && len(p) > 0; i++ {
		r, size := utf8.DecodeLastRune(p)
		if r != utf8.RuneError || size > 1 {
			return p
		}
		p = p[:len(p)-1]
	}
	return p
}

// onOther receives messages on topics the client did not route (a stale
// subscription of the persistent session); they are acknowledged and
// ignored.
func (c *Client) onOther(m *inMsg) {
	c.log.Warn().Str("topic", m.Topic()).Msg("mqtt: message on an unexpected topic acknowledged and ignored")
	m.Ack()
}
