package mqtt

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/privfs"
)

// RejectedFile, in Config.StateDir, lists the digests of the retained
// messages the client dead-lettered, so that a retained bad message is
// dead-lettered once, not at every restart.
const RejectedFile = "mqtt-rejected.json"

// maxRejected bounds the digests kept (the oldest are forgotten).
const maxRejected = 1024

// rejectedSet remembers retained messages already dead-lettered. It is
// read from its file at first use and written through at every addition
// (atomically, 0600). Without a file it remembers for the process's life.
type rejectedSet struct {
	mu     sync.Mutex // guards the fields below
	path   string     // "" : memory only
	loaded bool
	list   []string // digests, oldest first
}

func newRejectedSet(dir string) *rejectedSet {
	r := &rejectedSet{}
	if dir != "" {
		r.path = filepath.Join(dir, RejectedFile)
	}
	return r
}

// retainedDigest names a retained message: its topic and its payload.
func retainedDigest(topic string, payload []byte) string {
	h := sha256.New()
	h.Write([]byte(topic))
	h.Write([]byte{0})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil))
}

// load reads the file once; a missing file is an empty set, a damaged one
// is reported and replaced at the next addition (the worst outcome is one
// more dead letter).
func (r *rejectedSet) load() error {
	if r.loaded || r.path == "" {
		r.loaded = true
		return nil
	}
	r.loaded = true
	data, err := os.ReadFile(r.path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("%s: %w", r.path, err)
	}
	r.list = list
	return nil
}

// seen reports whether digest was dead-lettered before.
func (r *rejectedSet) seen(digest string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	err := r.load()
	return slices.Contains(r.list, digest), err
}

// add remembers digest, durably when the set has a file.
func (r *rejectedSet) add(digest string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.load()
	if slices.Contains(r.list, digest) {
		return nil
	}
	r.list = append(r.list, digest)
	if over := len(r.list) - maxRejected; over > 0 {
		r.list = slices.Delete(r.list, 0, over)
	}
	if r.path == "" {
		return nil
	}
	data, err := json.Marshal(r.list)
	if err != nil {
		return err
	}
	if err := privfs.MkdirAll(filepath.Dir(r.path)); err != nil {
		return err
	}
	return atomicfile.WriteFile(r.path, append(data, '\n'), privfs.FileMode)
}
