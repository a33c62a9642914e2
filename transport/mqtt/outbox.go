package mqtt

import (
	"encoding/json"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/core/agent"
)

// publishWindow bounds the results published and not yet acknowledged.
const publishWindow = 256

// resultMsg is the payload of the results topic: the same encoding as a
// finished task over HTTP (GET /agents/{id}/tasks/{task_id}, ?wait=), so
// that a result reads the same whichever way it came: output and error are
// left out when the task has none.
type resultMsg = agent.TaskState

// pending is one result on its way to the broker. Only the publisher
// goroutine touches it once it left Client.incoming.
type pending struct {
	seq     uint64
	taskID  string
	payload []byte
	tok     paho.Token // nil: (re)publish when connected
	sentAt  time.Time
	mark    uint64    // resumeStore mark before it was published
	retryAt time.Time // after a failed publication: not before this
}

// Deliver takes results that are durable in the snapshot's outbox (it is
// the runtime's agent.Outbox). It never blocks: the results wait in order
// for the publisher goroutine, which publishes them whenever the broker is
// reachable and confirms each to the runtime after its PUBACK.
func (c *Client) Deliver(results []agent.Result) {
	if len(results) == 0 {
		return
	}
	ps := make([]*pending, 0, len(results))
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
		ps = append(ps, &pending{seq: r.Seq, taskID: r.TaskID, payload: payload})
	}
	c.incoming = append(c.incoming, ps...)
	c.mu.Unlock()
	c.waitingN.Add(int64(len(ps)))
	c.nudge()
}

// publishLoop publishes the results in order, at most publishWindow
// unacknowledged at a time, and confirms each after its PUBACK. A
// publication whose connection broke is resent by paho's resume after the
// reconnection, which also completes its token without a PUBACK
// (resumeStore tells), so it is published again; so is one that failed
// outright or waited PublishTimeout on a live connection. The hub may see
// a result twice, never lose one.
func (c *Client) publishLoop() {
	defer c.wg.Done()
	var (
		list        []*pending // in Seq order
		outstanding int        // entries of list with a token
		lastGen     uint64
		reports     []progressMsg // progress reports to publish, in order
		ticked      bool          // this pass follows the check tick
	)
	tick := time.NewTicker(c.checkEvery)
	defer tick.Stop()
	for {
		c.mu.Lock()
		fresh := len(c.incoming) > 0
		list = append(list, c.incoming...)
		c.incoming = nil
		reports = pendingProgress(reports, c.reports)
		clear(c.reports)
		c.reports = c.reports[:0]
		up, gen := c.conn, c.gen
		c.mu.Unlock()

		// The reports go out before the results of this pass; "done"
		// reports alone wait for their results (Progress).
		if len(reports) > 0 && (fresh || ticked || !allDone(reports)) {
			if up {
				c.publishProgress(reports)
			}
			clear(reports)
			reports = reports[:0]
		}
		ticked = false

		if up && gen != lastGen {
			lastGen = gen
			if n := len(list); n > 0 && gen > 1 {
				c.log.Info().Int("results", n).Msg("mqtt: delivering results held while disconnected")
			}
		}
		if up {
			for _, p := range list {
				if outstanding >= publishWindow {
					break
				}
				if p.tok == nil {
					if time.Now().Before(p.retryAt) {
						break // keep the order: nothing overtakes a result waiting to retry
					}
					p.mark = c.store.Mark()
					p.tok = c.pc.Publish(c.topics.Results, 1, false, p.payload)
					p.sentAt = time.Now()
					outstanding++
				}
			}
		}

		// Settle what finished, in order of the list.
		var head *pending
		kept := list[:0]
		seen, tokens := 0, outstanding // outstanding falls as tokens settle
		for i, p := range list {
			if seen == tokens {
				kept = append(kept, list[i:]...)
				break
			}
			if p.tok == nil {
				kept = append(kept, p)
				continue
			}
			seen++
			select {
			case <-p.tok.Done():
			default:
				if head == nil {
					head = p
				}
				kept = append(kept, p)
				continue
			}
			outstanding--
			if err := p.tok.Error(); err != nil {
				c.log.Debug().Err(err).Str("task", p.taskID).Msg("mqtt: result publication failed; it is published again")
				p.tok, p.retryAt = nil, time.Now().Add(time.Second)
				kept = append(kept, p)
				continue
			}
			if pt, ok := p.tok.(*paho.PublishToken); !ok || c.store.ResumedSince(pt.MessageID(), p.mark) {
				// paho resumed it after a reconnection and completed
				// this token without a PUBACK: publish it again.
				p.tok = nil
				kept = append(kept, p)
				continue
			}
			c.rt.Confirm(p.seq)
			c.published.Add(1)
			c.waitingN.Add(-1)
		}
		clear(list[len(kept):])
		list = kept

		if up && outstanding < publishWindow && nextReady(list) {
			// The window has room and a result is waiting for it: the
			// PUBACKs of the last ones all arrived while they were
			// settled, so no token is left to wake the loop.
			continue
		}
		var done <-chan struct{}
		if head != nil {
			done = head.tok.Done()
		}
		select {
		case <-done:
		case <-c.wake:
		case <-tick.C:
			ticked = true
			if head != nil && up && time.Since(head.sentAt) > c.cfg.PublishTimeout {
				c.log.Warn().Str("task", head.taskID).Dur("waited", time.Since(head.sentAt)).
					Msg("mqtt: no PUBACK for a result; publishing it again")
				head.tok = nil
				outstanding--
			}
		case <-c.ctx.Done():
			return
		}
	}
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
// (bufferedConn), and the broker wakes once for them. A report left
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

// publishProgress publishes the reports in batch (QoS 0, not waited for).
func (c *Client) publishProgress(batch []progressMsg) {
	for _, p := range batch {
		body, _ := json.Marshal(p)
		c.pc.Publish(c.topics.Progress, 0, false, body)
	}
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

// nextReady reports whether the first result of list not yet published may
// be published now (it is not waiting to retry).
func nextReady(list []*pending) bool {
	for _, p := range list {
		if p.tok == nil {
			return !time.Now().Before(p.retryAt)
		}
	}
	return false
}
