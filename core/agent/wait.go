package agent

import (
	"context"
	"slices"
)

// Final reports whether a task state is final: done, failed or
// unknown_outcome.
func (st TaskState) Final() bool {
	return st.Status != TaskQueued && st.Status != TaskRunning && st.Status != ""
}

// WaitTask returns the task's state once it is final, or its current state
// when ctx ends first (found=false for a task the agent does not know). It
// is what lets a client submit a task and wait for its result without
// polling: it wakes when the tick that finished the task has been saved,
// which is when TaskState starts to report the result.
func (r *Runtime) WaitTask(ctx context.Context, taskID string) (TaskState, bool, error) {
	for {
		ch := make(chan struct{})
		r.mu.Lock()
		if r.waiters == nil {
			r.waiters = map[string][]chan struct{}{}
		}
		r.waiters[taskID] = append(r.waiters[taskID], ch)
		r.mu.Unlock()
		// Registered before looking, so a result remembered in between
		// closes ch instead of being missed.
		st, ok, err := r.TaskState(ctx, taskID)
		if err != nil || !ok || st.Final() {
			r.unwait(taskID, ch)
			return st, ok, err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			r.unwait(taskID, ch)
			return st, true, nil
		case <-r.exited:
			r.unwait(taskID, ch)
			return r.TaskState(context.WithoutCancel(ctx), taskID)
		}
	}
}

// wake closes the waiters of a task; r.mu is held.
func (r *Runtime) wake(taskID string) {
	for _, ch := range r.waiters[taskID] {
		close(ch)
	}
	delete(r.waiters, taskID)
}

func (r *Runtime) unwait(taskID string, ch chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := slices.DeleteFunc(r.waiters[taskID], func(c chan struct{}) bool { return c == ch })
	if len(ws) == 0 {
		delete(r.waiters, taskID)
	} else {
		r.waiters[taskID] = ws
	}
}
