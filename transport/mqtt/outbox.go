package mqtt

import (
	"encoding/json"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/transport/mqtt/wire"
)

// publishWindow bounds the results published and not yet acknowledged.
const publishWindow = 256

// resultMsg is the payload of the results topic: the same encoding as a
// finished task over HTTP (GET /agents/{id}/tasks/{task_id}, ?wait=), so
// that a result reads the same whichever way it came: output and error are
// left out when the task has none.
type resultMsg = agent.TaskState

// pending is one result on its way to the broker, in Client.flight; c.mu
// guards it.
type pending struct {
	seq     uint64
	taskID  string
	payload []byte
	id      uint16    // its packet id, once published (kept until its PUBACK)
	acked   bool      // its PUBACK came (it waits for those before it)
	sentAt  time.Time // its last publication
}

// Deliver takes results that are durable in the snapshot's outbox (it is
// the runtime's agent.Outbox). It never blocks: the results wait in order
// for the publisher goroutine, which publishes them whenever the broker is
// reachable; each is confirmed to the runtime after its PUBACK.
func (c *Client) Deliver(results []agent.Result) {
	if len(results) == 0 {
		return
	}
	n := 0
	c.mu.Lock()
	for _, r := range results {
		if c.anySeq && r.Seq <= c.lastSeq {
			continue // handed over already
		}
		c.lastSeq, c.anySeq = r.Seq, true
		msg := resultMsg{TaskID: r.TaskID, AgentID: r.AgentID, Status: r.Status,
			Output: r.Output, Error: r.Error, TickIndex: r.TickIndex}
		payload, err := msg.AppendJSON(nil)
		if err != nil {
			// Output is JSON the runtime produced; this cannot happen,
			// but a result must never vanish silently.
			payload, _ = json.Marshal(resultMsg{TaskID: r.TaskID, AgentID: r.AgentID, Status: agent.ResultFailed,
				Error: "result output is not JSON: " + err.Error(), TickIndex: r.TickIndex})
		}
		c.flight = append(c.flight, &pending{seq: r.Seq, taskID: r.TaskID, payload: payload})
		n++
	}
	if n > 0 {
		c.fresh = true
	}
	c.mu.Unlock()
	c.waitingN.Add(int64(n))
	c.nudge()
}

// publishLoop is the publisher: woken by the runtime (tasks durable,
// results saved, progress), by the reader (room in the window) or by its
// check tick, it writes in one write, in this order, the PUBACKs of the
// tasks the runtime made durable, the progress reports, and the results
// not yet published (at most publishWindow waiting for their PUBACK), in
// Seq order. After a reconnection it first publishes again, with their
// packet ids and DUP, the results still waiting for their PUBACK; at the
// check tick it does the same for the oldest one when it waited
// PublishTimeout. The reader confirms them (acked). The hub may see a
// result twice, never lose one.
func (c *Client) publishLoop() {
	defer c.wg.Done()
	var (
		acks    []*taken
		reports []progressMsg // progress reports to publish, in order
		ticked  bool          // this pass follows the check tick
		buf     []byte
	)
	tick := time.NewTicker(c.checkEvery)
	defer tick.Stop()
	for {
		c.ackMu.Lock()
		acks, c.acks = c.acks, acks[:0]
		c.ackMu.Unlock()
		c.mu.Lock()
		fresh := c.fresh
		c.fresh = false
		reports = pendingProgress(reports, c.reports)
		clear(c.reports)
		c.reports = c.reports[:0]
		nc, gen := c.nc, c.gen
		c.mu.Unlock()

		buf = buf[:0]
		for i, t := range acks {
			if c.settle(t) && t.m.qos > 0 && t.m.gen == gen && nc != nil {
				// A message of an earlier connection is delivered again
				// on this one, and acknowledged then.
				buf = wire.AppendPuback(buf, t.m.id)
			}
			acks[i] = nil
		}
		// The reports go out before the results of this pass; "done"
		// reports alone wait for their results (Progress).
		if len(reports) > 0 && (fresh || ticked || !allDone(reports)) {
			if nc != nil {
				for _, p := range reports {
					body, _ := json.Marshal(p)
					buf = wire.AppendPublish(buf, c.topics.Progress, body, 0, 0, false, false)
				}
			}
			clear(reports)
			reports = reports[:0]
		}
		if nc != nil {
			buf = c.appendResults(buf, gen, ticked)
		}
		ticked = false
		if len(buf) > 0 {
			c.writeOn(nc, buf) // on failure the reader fails; the results are published again
		}
		if cap(buf) > 1<<20 {
			buf = nil
		}
		select {
		case <-c.wake:
		case <-tick.C:
			ticked = true
		case <-c.ctx.Done():
			c.ackMu.Lock()
			acks, c.acks = c.acks, nil
			c.ackMu.Unlock()
			for _, t := range acks {
				c.settle(t) // not acknowledged: the broker redelivers them
			}
			return
		}
	}
}

// appendResults appends to buf the results to publish on connection gen:
// after a reconnection those waiting for their PUBACK (DUP, same packet
// id), at a check tick the oldest one when it waited PublishTimeout, then
// those not yet published, while the window has room.
func (c *Client) appendResults(buf []byte, gen uint64, ticked bool) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nc == nil || c.gen != gen {
		return buf // the next connection's pass publishes them
	}
	now := time.Now()
	if c.resend {
		c.resend = false
		if len(c.flight) > 0 && gen > 1 {
			c.log.Info().Int("results", len(c.flight)).Msg("mqtt: delivering results held while disconnected")
		}
		for _, p := range c.flight[:c.sent] {
			if !p.acked {
				buf = wire.AppendPublish(buf, c.topics.Results, p.payload, 1, p.id, false, true)
				p.sentAt = now
			}
		}
	} else if ticked && c.sent > 0 {
		if h := c.flight[0]; now.Sub(h.sentAt) > c.cfg.PublishTimeout {
			c.log.Warn().Str("task", h.taskID).Dur("waited", now.Sub(h.sentAt)).
				Msg("mqtt: no PUBACK for a result; publishing it again")
			buf = wire.AppendPublish(buf, c.topics.Results, h.payload, 1, h.id, false, true)
			h.sentAt = now
		}
	}
	for c.sent < len(c.flight) && c.sent < publishWindow && len(c.ops) < maxOps {
		p := c.flight[c.sent]
		p.id, p.sentAt = c.newID(), now
		c.ops[p.id] = opRef{p: p}
		buf = wire.AppendPublish(buf, c.topics.Results, p.payload, 1, p.id, false, false)
		c.sent++
	}
	return buf
}

// progressMsg is the payload of the progress topic.
type progressMsg struct {
	TaskID  string `json:"task_id"`
	Percent int    `json:"progress_percent"`
	Phase   string `json:"phase"`
}

// maxReports bounds the progress reports waiting for the publisher; more
// are dropped (QoS 0, best effort).
const maxReports = 256

// Progress is the runtime's OnProgress: it never blocks. The publisher
// goroutine publishes the reports, in order, before the results it
// publishes in the same pass, and drops them while the broker is
// unreachable; a report still waiting when the same task's next one comes
// is replaced by it (pendingProgress).
//
// A task's "done" report does not wake the publisher: it waits for the
// next result, which is that task's once its save returns (the runtime
// reports "done" before it saves the result), so that the report, the
// result and the task's PUBACK leave in one write instead of three
// (publishLoop), and the broker wakes once for them. A report left
// waiting (the save failed) goes out at the publisher's next check, within
// checkEvery.
func (c *Client) Progress(taskID string, percent int, phase string) {
	c.mu.Lock()
	if len(c.reports) >= maxReports {
		c.mu.Unlock()
		return
	}
	c.reports = append(c.reports, progressMsg{TaskID: taskID, Percent: percent, Phase: phase})
	c.mu.Unlock()
	if phase != phaseDone {
		c.nudge()
	}
}

// phaseDone is the phase of a task's last report (agent.Runtime's).
const phaseDone = "done"

// supersedes reports whether report p, of the same task as prev, replaces
// prev while both wait (pendingProgress).
func supersedes(p, prev progressMsg) bool {
	return p.Phase != phaseDone || prev.Phase == phaseDone || prev.Phase == phaseThinking
}

// phaseThinking is the phase of a step's first report (agent.Runtime's).
const phaseThinking = "thinking"

// allDone reports whether every report of batch is a task's "done".
func allDone(batch []progressMsg) bool {
	for _, p := range batch {
		if p.Phase != phaseDone {
			return false
		}
	}
	return true
}

// pendingProgress appends to batch the reports waiting in reports, each
// replacing the one before it when both are of the same task (a model's
// token counts come many a second), except that a "done" replaces only a
// plain "thinking": an echo task's "thinking" and "done" come microseconds
// apart, and publishing both cost a message to the broker, and its
// routing, per task for a report already stale; a report that says more
// (the model's last token count, a tool) is published before the "done".
func pendingProgress(batch, reports []progressMsg) []progressMsg {
	for _, p := range reports {
		if n := len(batch); n > 0 && batch[n-1].TaskID == p.TaskID && supersedes(p, batch[n-1]) {
			batch[n-1] = p
		} else {
			batch = append(batch, p)
		}
	}
	return batch
}
