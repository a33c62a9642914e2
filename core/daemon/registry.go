package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// RegistryFile is where the daemon keeps its workers and pending handoffs.
const RegistryFile = "workers.json"

// registry is the daemon's durable memory of the workers it spawned and of
// the tasks it handed them whose results have not yet reached their
// requesters. Every change is written (temporary file, fsync, rename, fsync
// of the directory) before the daemon acts on it, so that after a crash of
// the daemon the next one restores the workers and resumes each handoff.
type registry struct {
	path string

	mu   sync.Mutex // guards data and serialises writes of the file
	data regData
}

type regData struct {
	Workers  []regWorker `json:"workers"`
	Handoffs []handoff   `json:"handoffs"`
}

// regWorker is one spawned worker.
type regWorker struct {
	ID        string    `json:"id"`
	Template  string    `json:"template"`
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	// Stopped is set by `openstarry agent stop`: the worker is not
	// restored at the next boot.
	Stopped bool `json:"stopped,omitempty"`
	// Retiring is set before an ephemeral worker's snapshot is deleted:
	// a boot that finds it finishes the retirement instead of restoring
	// the worker. Storage is the worker's own store URL, if any.
	Retiring bool   `json:"retiring,omitempty"`
	Storage  string `json:"storage,omitempty"`
}

// handoff is a task given to a worker whose result goes back to the
// requester.
type handoff struct {
	Worker    string          `json:"worker"`
	Requester string          `json:"requester"`
	TaskID    string          `json:"task_id"`
	Task      json.RawMessage `json:"task"`
	// Handed is set once the worker has made the task durable.
	Handed bool `json:"handed,omitempty"`
}

func openRegistry(runDir string) (*registry, error) {
	r := &registry{path: filepath.Join(runDir, RegistryFile)}
	data, err := os.ReadFile(r.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return r, nil
	case err != nil:
		return nil, fmt.Errorf("worker registry: %w", err)
	}
	if err := json.Unmarshal(data, &r.data); err != nil {
		return nil, fmt.Errorf("worker registry %s is damaged (%v); move it away to start without the previous workers", r.path, err)
	}
	return r, nil
}

// update applies fn and writes the result; on a write error the change is
// undone.
func (r *registry) update(fn func(d *regData)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.data.clone()
	fn(&r.data)
	b, err := json.MarshalIndent(&r.data, "", "  ")
	if err == nil {
		err = atomicfile.WriteFile(r.path, append(b, '\n'), privfs.FileMode)
	}
	if err != nil {
		r.data = old
		return fmt.Errorf("worker registry: %w", err)
	}
	return nil
}

func (r *registry) snapshot() regData {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.data.clone()
}

func (d regData) clone() regData {
	return regData{Workers: slices.Clone(d.Workers), Handoffs: slices.Clone(d.Handoffs)}
}

func (r *registry) addWorker(w regWorker, h *handoff) error {
	return r.update(func(d *regData) {
		d.Workers = slices.DeleteFunc(d.Workers, func(x regWorker) bool { return x.ID == w.ID })
		d.Workers = append(d.Workers, w)
		if h != nil {
			d.Handoffs = append(d.Handoffs, *h)
		}
	})
}

func (r *registry) removeWorker(id string) error {
	return r.update(func(d *regData) {
		d.Workers = slices.DeleteFunc(d.Workers, func(x regWorker) bool { return x.ID == id })
	})
}

func (r *registry) setStopped(id string, stopped bool) error {
	return r.update(func(d *regData) {
		for i := range d.Workers {
			if d.Workers[i].ID == id {
				d.Workers[i].Stopped = stopped
			}
		}
	})
}

func (r *registry) setRetiring(id string) error { return r.retiring(id, true) }

func (r *registry) clearRetiring(id string) error { return r.retiring(id, false) }

func (r *registry) retiring(id string, on bool) error {
	return r.update(func(d *regData) {
		for i := range d.Workers {
			if d.Workers[i].ID == id {
				d.Workers[i].Retiring = on
			}
		}
	})
}

func (r *registry) markHanded(worker, taskID string) error {
	return r.update(func(d *regData) {
		for i := range d.Handoffs {
			if d.Handoffs[i].Worker == worker && d.Handoffs[i].TaskID == taskID {
				d.Handoffs[i].Handed = true
			}
		}
	})
}

func (r *registry) removeHandoff(worker, taskID string) error {
	return r.update(func(d *regData) {
		d.Handoffs = slices.DeleteFunc(d.Handoffs, func(h handoff) bool { return h.Worker == worker && h.TaskID == taskID })
	})
}
