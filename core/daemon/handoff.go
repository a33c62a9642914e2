package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
)

// WorkerResultType is the task type of the event that carries a worker's
// result back to the agent that spawned it.
const WorkerResultType = "worker_result"

// WorkerResult is the input of a worker_result task.
type WorkerResult struct {
	Worker    string          `json:"worker"`
	TaskID    string          `json:"task_id"`
	Status    string          `json:"status"` // done, failed, unknown_outcome
	Output    json.RawMessage `json:"output,omitempty"`
	Error     string          `json:"error,omitempty"`
	TickIndex uint64          `json:"tick_index,omitempty"`
}

var errGone = errors.New("agent is no longer supervised")

// handoffs carries tasks from requesters to workers and their results
// back (run), each in its own goroutine, until the daemon's life ends: a
// handoff cut short resumes at the next boot from the registry (the
// workers' part records each one before it starts). It owns those
// goroutines; the agents' addresses come from the supervisor.
type handoffs struct {
	log     zerolog.Logger
	life    context.Context // ends at shutdown: every handoff stops
	httpc   *http.Client    // to the agents' loopback APIs
	super   *supervisor
	workers *workers // the registry; retirement once a worker's last result is delivered

	wg sync.WaitGroup // the running handoffs
}

// start carries h in its own goroutine.
func (hs *handoffs) start(h handoff) {
	hs.wg.Add(1)
	go func() {
		defer hs.wg.Done()
		hs.run(hs.life, h)
	}()
}

// wait waits for the handoffs to end (after the daemon's life has).
func (hs *handoffs) wait() { hs.wg.Wait() }

// run takes one task from the requester to the worker and its
// result back: (1) POST the task to the worker until it is durable there,
// and record that; (2) poll its state until it is final; (3) POST a
// worker_result task to the requester until it is durable there, then
// forget the handoff. Each step is repeated after a restart of either
// agent or of the daemon; the ids make repetitions duplicates.
func (hs *handoffs) run(ctx context.Context, h handoff) {
	log := hs.log.With().Str("worker", h.Worker).Str("task", h.TaskID).Str("requester", h.Requester).Logger()
	var res WorkerResult
	if !h.Handed {
		err := hs.retry(ctx, h.Worker, func(addr string) (bool, error) {
			code, body, err := hs.postTask(ctx, addr, h.Worker, h.Task)
			switch {
			case err != nil:
				return false, nil
			case code == http.StatusAccepted || code == http.StatusOK:
				return true, nil
			case code == http.StatusBadRequest:
				return true, fmt.Errorf("the worker refused the task: %s", bytes.TrimSpace(body))
			}
			return false, nil
		})
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			res = WorkerResult{Status: agent.ResultFailed, Error: err.Error()}
		default:
			if err := hs.workers.reg.markHanded(h.Worker, h.TaskID); err != nil {
				log.Error().Err(err).Msg("recording the handoff")
			}
			log.Info().Msg("task handed to the worker")
		}
	}
	if res.Status == "" {
		err := hs.retry(ctx, h.Worker, func(addr string) (bool, error) {
			st, code, err := hs.getTask(ctx, addr, h.Worker, h.TaskID)
			switch {
			case err != nil:
				return false, nil
			case code == http.StatusNotFound:
				// Not known there (never durable?): hand it again.
				_, _, _ = hs.postTask(ctx, addr, h.Worker, h.Task)
				return false, nil
			case code != http.StatusOK:
				return false, nil
			}
			switch st.Status {
			case agent.ResultDone, agent.ResultFailed, agent.ResultUnknownOutcome:
				res = WorkerResult{Status: st.Status, Output: st.Output, Error: st.Error, TickIndex: st.TickIndex}
				return true, nil
			}
			return false, nil
		})
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			res = WorkerResult{Status: agent.ResultFailed, Error: fmt.Sprintf("worker %s: %v before the task finished", h.Worker, err)}
		}
	}
	res.Worker, res.TaskID = h.Worker, h.TaskID
	log.Info().Str("status", res.Status).Msg("worker result ready; forwarding it to the requester")
	task := resultTask(res, 0)
	err := hs.retry(ctx, h.Requester, func(addr string) (bool, error) {
		code, body, err := hs.postTask(ctx, addr, h.Requester, task)
		switch {
		case err != nil:
			return false, nil
		case code == http.StatusAccepted || code == http.StatusOK:
			return true, nil
		case code == http.StatusBadRequest && bytes.Contains(body, []byte(agent.CodeTooLarge)):
			task = resultTask(res, len(res.Output))
			return false, nil
		case code == http.StatusBadRequest:
			return true, fmt.Errorf("the requester refused the result: %s", bytes.TrimSpace(body))
		}
		return false, nil
	})
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		log.Error().Err(err).Msg("worker result not delivered; dropping it")
	} else {
		log.Info().Str("result_task", control.ResultTaskID(h.Worker, h.TaskID)).Msg("worker result delivered to the requester")
	}
	if err := hs.workers.reg.removeHandoff(h.Worker, h.TaskID); err != nil {
		log.Error().Err(err).Msg("forgetting the handoff")
		return
	}
	hs.workers.retireIfDone(ctx, h.Worker)
}

// resultTask builds the worker_result task. With dropped > 0 the output
// did not fit the requester's task size limit and is left out.
func resultTask(res WorkerResult, dropped int) json.RawMessage {
	if dropped > 0 {
		res.Output = nil
		note := fmt.Sprintf("the output (%d bytes) exceeded the requester's task size limit and was left out", dropped)
		if res.Error != "" {
			note = res.Error + "; " + note
		}
		res.Error = note
	}
	input, _ := json.Marshal(res)
	b, _ := json.Marshal(agent.Task{TaskID: control.ResultTaskID(res.Worker, res.TaskID), Type: WorkerResultType, Input: input})
	return b
}

// retry runs fn against agent id's address whenever it runs, until fn
// reports done, the agent leaves the daemon (errGone) or ctx ends. Between
// attempts it waits 20ms, doubling to 1s.
func (hs *handoffs) retry(ctx context.Context, id string, fn func(addr string) (bool, error)) error {
	wait := 20 * time.Millisecond
	for {
		addr, err := hs.super.waitRunning(ctx, id)
		if err != nil {
			return err
		}
		done, err := fn(addr)
		if done || err != nil {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, time.Second)
	}
}

func (hs *handoffs) postTask(ctx context.Context, addr, id string, task json.RawMessage) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", addr+"/agents/"+url.PathEscape(id)+"/tasks", bytes.NewReader(task))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hs.httpc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

func (hs *handoffs) getTask(ctx context.Context, addr, id, taskID string) (agent.TaskState, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", addr+"/agents/"+url.PathEscape(id)+"/tasks/"+url.PathEscape(taskID), nil)
	if err != nil {
		return agent.TaskState{}, 0, err
	}
	resp, err := hs.httpc.Do(req)
	if err != nil {
		return agent.TaskState{}, 0, err
	}
	defer resp.Body.Close()
	var st agent.TaskState
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&st); err != nil {
			return st, 0, err
		}
	} else {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	}
	return st, resp.StatusCode, nil
}
