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
	)
	tick := time.NewTicker(c.checkEvery)
	defer tick.Stop()
	for {
		c.mu.Lock()
		list = append(list, c.incoming...)
		c.incoming = nil
		up, gen := c.conn, c.gen
		c.mu.Unlock()

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

// Progress is the runtime's OnProgress: it never blocks, and drops the
// report when the broker is unreachable or reports pile up (QoS 0): a
// report still waiting when the same task's next one comes is replaced by
// it (pendingProgress).
func (c *Client) Progress(taskID string, percent int, phase string) {
	select {
	case c.progress <- progressMsg{TaskID: taskID, Percent: percent, Phase: phase}:
	default:
	}
}

func (c *Client) progressLoop() {
	defer c.wg.Done()
	var batch []progressMsg
	for {
		select {
		case p := <-c.progress:
			batch = c.pendingProgress(append(batch[:0], p))
			if !c.pc.IsConnectionOpen() {
				continue
			}
			for _, p := range batch {
				body, _ := json.Marshal(p)
				c.pc.Publish(c.topics.Progress, 0, false, body)
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// pendingProgress appends to batch the reports waiting, each replacing the
// one before it when both are of the same task: an echo task's "thinking"
// and "done" come microseconds apart, and publishing both cost a message
// to the broker, and its routing, per task for a report already stale.
func (c *Client) pendingProgress(batch []progressMsg) []progressMsg {
	for {
		select {
		case p := <-c.progress:
			if n := len(batch); n > 0 && batch[n-1].TaskID == p.TaskID {
				batch[n-1] = p
			} else {
				batch = append(batch, p)
			}
		default:
			return batch
		}
	}
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
