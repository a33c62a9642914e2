package fleet

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
)

// Nonces remembers the ids of the commands a device obeyed until they
// expire, in a file, so that a command captured on the hub cannot be played
// again, not even after a restart. A command is recorded (fsynced) before it
// runs: a crash in between loses the command, never runs it twice.
type Nonces struct {
	path string
	mu   sync.Mutex
	seen map[string]time.Time // id → expiry
}

// MaxNonces bounds the ids kept; a device asked to keep more refuses
// commands until some expire.
const MaxNonces = 10000

// OpenNonces loads the file at path (missing: none seen).
func OpenNonces(path string) (*Nonces, error) {
	n := &Nonces{path: path, seen: map[string]time.Time{}}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return n, nil
	case err != nil:
		return nil, fmt.Errorf("fleet nonces: %w", err)
	}
	if err := json.Unmarshal(data, &n.seen); err != nil {
		// Losing the record would let old commands be replayed: refuse
		// to start rather than forget.
		return nil, fmt.Errorf("fleet nonces %s: damaged (%v); remove it only if no signed command issued in the last %s can be replayed", path, err, MaxLifetime)
	}
	return n, nil
}

// Record marks id seen until expires and makes it durable. It refuses an id
// seen before.
func (n *Nonces) Record(id string, expires, now time.Time) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	for k, exp := range n.seen {
		if !now.Before(exp) {
			delete(n.seen, k)
		}
	}
	if _, dup := n.seen[id]; dup {
		return refuse(CodeReplayed, "command %s was obeyed before", id)
	}
	if len(n.seen) >= MaxNonces {
		return refuse(CodeReplayed, "too many recent commands (%d); try again later", len(n.seen))
	}
	n.seen[id] = expires
	data, err := json.Marshal(n.seen)
	if err == nil {
		err = atomicfile.WriteFile(n.path, data, 0o600)
	}
	if err != nil {
		delete(n.seen, id)
		return fmt.Errorf("fleet nonces: %w", err)
	}
	return nil
}
