package file

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "storage.file",
		Description: "one pretty-printed JSON file per agent, for development and hand inspection",
		New:         plugin.StorageOpener(openURL),
	})
}

// File name suffixes; see the package documentation.
const (
	extCurrent  = ".json"
	extPrev     = ".json.prev"
	extRejected = ".json.rejected"
	extResults  = ".results.jsonl"
	extCopy     = ".results.jsonl.copy"
)

// Options configure a Store.
type Options struct {
	// Logger receives a warning for each damaged file Load skips, and a
	// note for each hand-edited file it accepts. The zero Logger discards
	// them.
	Logger zerolog.Logger

	// Retention bounds the task index of each agent. A zero field takes
	// the value of plugin.DefaultRetention; a negative one means no limit.
	Retention plugin.Retention

	// Now is the clock that stamps indexed results and ages them out.
	// Default time.Now.
	Now func() time.Time
}

// Store is the file snapshot store. It is safe for concurrent use; calls for
// one agent are expected from that agent's single owner goroutine, and are
// serialised per agent anyway.
type Store struct {
	dir string
	log zerolog.Logger
	ret plugin.Retention
	now func() time.Time

	agents backend.Agents[agentState] // per agent id; refused after Close
}

// agentState is what the store knows of one agent's files.
type agentState struct {
	mu sync.Mutex // serialises the agent's Save, Load and Delete, and guards the fields below

	// known says the fields below describe the files on disk, as of cur.
	known bool
	// gen and indexedSeq are those of the generation the next Save builds
	// on: the newest good one.
	gen, indexedSeq uint64
	// cur is the state of ID.json: curMissing, curGood or curBad.
	cur curState
	// curInfo identifies ID.json as this store last wrote or read it;
	// a different size, time or file means someone else changed it.
	curInfo os.FileInfo

	results *resultsState // nil until the results file was scanned

	// shown is 1 + the indexed seq of the last committed generation, read
	// by TaskResult without mu: a save appends its results to the task
	// index before its commit point, and they are not served until it
	// passes it. 0 until this store loaded or saved the agent (every line
	// is served).
	shown atomic.Uint64
}

type curState int

const (
	curMissing curState = iota
	curGood
	curBad
)

// openURL is the plugin opener: file:///abs/dir, file://rel/dir, or file://
// for {DataDir}/snapshots. Query parameters: retention_tasks (a count) and
// retention_age (a Go duration such as 168h).
func openURL(ctx context.Context, u *url.URL, env plugin.Env) (plugin.Storage, error) {
	o := Options{Logger: env.Log}
	dir, err := backend.PathURL(u, env, "snapshots", &o.Retention)
	if err != nil {
		return nil, fmt.Errorf("file: store url %s: %w", u.Redacted(), err)
	}
	return Open(ctx, dir, o)
}

// Open opens the store in dir, creating the directory if needed. It reads no
// snapshot until asked.
func Open(ctx context.Context, dir string, o Options) (*Store, error) {
	if dir == "" {
		return nil, errors.New("file: open: empty directory")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("file: open %s: %w", dir, err)
	}
	// The whole path made durable: a name on it lost in a power cut
	// would lose every snapshot under it.
	if err := privfs.MkdirAll(abs); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", abs, err)
	}
	if err := atomicfile.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("file: open %s: %w", abs, err)
	}
	s := &Store{dir: abs, log: o.Logger, ret: backend.Retention(o.Retention), now: o.Now}
	if s.now == nil {
		s.now = time.Now
	}
	return s, nil
}

// Dir returns the absolute path of the store's directory.
func (s *Store) Dir() string { return s.dir }

// fileName returns the base name of the agent's files, without suffix. ':' is
// allowed in agent ids but not in Windows file names.
func fileName(id string) string { return strings.ReplaceAll(id, ":", "%3A") }

// idOf reverses fileName; it returns "" for a name that is not one of an
// agent's.
func idOf(base string) string {
	id := strings.ReplaceAll(base, "%3A", ":")
	if agent.ValidateID(id) != nil {
		return ""
	}
	return id
}

func (s *Store) path(id, ext string) string { return filepath.Join(s.dir, fileName(id)+ext) }

func (s *Store) tmpPath(id, ext string) string {
	return filepath.Join(s.dir, "."+fileName(id)+ext+".tmp")
}

// lock returns the agent's state, locked, or ErrClosed.
func (s *Store) lock(id string) (*agentState, error) {
	st, err := s.agents.GetOrAdd(id, newAgentState)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	return st, nil
}

func newAgentState(string) *agentState { return &agentState{} }

// Save writes snap as the agent's current file, keeping the one before as
// the previous generation, after appending its new results to the task
// index. It returns after the directory is fsynced.
func (s *Store) Save(ctx context.Context, snap *agent.Snapshot) error {
	if err := backend.CheckSave(ctx, "file", snap); err != nil {
		return err
	}
	id := snap.AgentID
	payload, err := agent.Encode(snap)
	if err != nil {
		return fmt.Errorf("file: save %s: %w", id, err)
	}
	st, err := s.lock(id)
	if err != nil {
		return fmt.Errorf("file: save %s: %w", id, err)
	}
	defer st.mu.Unlock()
	if err := s.save(ctx, st, snap, payload); err != nil {
		st.known = false // read the files again before the next Save
		return fmt.Errorf("file: save %s: %w", id, err)
	}
	return nil
}

func (s *Store) save(ctx context.Context, st *agentState, snap *agent.Snapshot, payload []byte) error {
	id := snap.AgentID
	cur := s.path(id, extCurrent)
	if !st.known || s.changed(cur, st.curInfo) {
		s.inspect(id, st)
	}

	// 1. The task index, fsynced before the snapshot names it indexed.
	indexedSeq, err := s.index(ctx, st, snap)
	if err != nil {
		return fmt.Errorf("task index: %w", err)
	}

	// 2. The new generation, complete and fsynced under a temporary name.
	gen := st.gen + 1
	data, err := encode(gen, indexedSeq, payload)
	if err != nil {
		return err
	}
	tmp := s.tmpPath(id, extCurrent)
	if err := writeSync(tmp, data); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		os.Remove(tmp)
		return err
	}

	// 3. Move the current file out of the way: a good one becomes the
	// previous generation, a refused one is set aside for a person. The
	// previous generation stays good throughout.
	switch st.cur {
	case curGood:
		err = atomicfile.Rename(cur, s.path(id, extPrev))
	case curBad:
		err = atomicfile.Rename(cur, s.path(id, extRejected))
		if err == nil {
			s.log.Warn().Str("agent", id).Str("file", s.path(id, extRejected)).
				Msg("file: the refused snapshot file was moved aside; the agent's state is in " + filepath.Base(cur))
		}
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		os.Remove(tmp)
		return err
	}
	// 4. The new generation takes the current name.
	if err := atomicfile.Rename(tmp, cur); err != nil {
		os.Remove(tmp)
		return err
	}
	// 5. Commit point: the directory, with both renames, is on disk.
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return err
	}
	info, err := os.Stat(cur)
	if err != nil {
		return err
	}
	st.known, st.gen, st.indexedSeq, st.cur, st.curInfo = true, gen, indexedSeq, curGood, info
	st.shown.Store(indexedSeq + 1)
	return nil
}

// changed reports whether the file at path is not the one info describes.
func (s *Store) changed(path string, info os.FileInfo) bool {
	now, err := os.Stat(path)
	if err != nil || info == nil {
		return err == nil || info != nil
	}
	return !os.SameFile(now, info) || now.Size() != info.Size() || !now.ModTime().Equal(info.ModTime())
}

// inspect reads the agent's files to learn what the next Save builds on.
func (s *Store) inspect(id string, st *agentState) {
	st.known, st.gen, st.indexedSeq, st.cur, st.curInfo = true, 0, 0, curMissing, nil
	cur, info, curErr := s.read(s.path(id, extCurrent), id)
	switch {
	case curErr == nil:
		st.gen, st.indexedSeq, st.cur, st.curInfo = cur.gen, cur.indexedSeq, curGood, info
		return
	case !errors.Is(curErr, fs.ErrNotExist):
		st.cur, st.curInfo = curBad, info
	}
	if prev, _, err := s.read(s.path(id, extPrev), id); err == nil {
		st.gen, st.indexedSeq = prev.gen+1, prev.indexedSeq
	}
}

// read reads and checks one snapshot file of agent id. Errors name the file;
// a missing file gives an error wrapping fs.ErrNotExist.
func (s *Store) read(path, id string) (*generation, os.FileInfo, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	info, _ := os.Stat(path)
	g, err := decode(data)
	if err != nil {
		return nil, info, fmt.Errorf("%s: %w", path, err)
	}
	if g.snap.AgentID != id {
		return nil, info, fmt.Errorf("%s: the snapshot is of agent %q, not %q", path, g.snap.AgentID, id)
	}
	return g, info, nil
}

// Load returns the agent's current snapshot, or the previous one with a
// warning when the current file is missing or fails its checks.
func (s *Store) Load(ctx context.Context, agentID string) (*agent.Snapshot, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("file: load: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file: load %s: %w", agentID, err)
	}
	st, err := s.lock(agentID)
	if err != nil {
		return nil, fmt.Errorf("file: load %s: %w", agentID, err)
	}
	defer st.mu.Unlock()

	st.known, st.gen, st.indexedSeq, st.cur, st.curInfo = true, 0, 0, curMissing, nil
	if err := s.repairResults(agentID); err != nil {
		return nil, fmt.Errorf("file: load %s: task index: %w", agentID, err)
	}
	st.results = nil // scanned again by the next Save
	curPath, prevPath := s.path(agentID, extCurrent), s.path(agentID, extPrev)
	cur, info, curErr := s.read(curPath, agentID)
	if curErr == nil {
		st.gen, st.indexedSeq, st.cur, st.curInfo = cur.gen, cur.indexedSeq, curGood, info
		if cur.edited {
			s.log.Info().Str("agent", agentID).Str("file", curPath).
				Msg("file: loaded a hand-edited snapshot (no checksum); the next save writes one")
		} else if err := s.dropUncommitted(agentID, cur.indexedSeq); err != nil {
			return nil, fmt.Errorf("file: load %s: task index: %w", agentID, err)
		}
		st.shown.Store(st.indexedSeq + 1)
		return cur.snap, nil
	}
	missing := errors.Is(curErr, fs.ErrNotExist)
	if !missing {
		st.cur, st.curInfo = curBad, info
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("file: load %s: %w", agentID, err)
	}
	prev, _, prevErr := s.read(prevPath, agentID)
	switch {
	case prevErr == nil:
		st.gen, st.indexedSeq = prev.gen+1, prev.indexedSeq
		if missing {
			// The previous generation is the last committed one: what
			// the interrupted save indexed is not.
			if err := s.dropUncommitted(agentID, prev.indexedSeq); err != nil {
				return nil, fmt.Errorf("file: load %s: task index: %w", agentID, err)
			}
		}
		ev := s.log.Warn().Str("agent", agentID).Str("file", prevPath)
		if missing {
			ev.Msg("file: the current snapshot file is missing (a save was interrupted); loaded the previous generation")
		} else {
			ev.Err(curErr).Msg("file: the current snapshot file is damaged or was edited without clearing its checksum; " +
				"loaded the previous generation, and the next save moves the refused file to " + filepath.Base(s.path(agentID, extRejected)))
		}
		st.shown.Store(st.indexedSeq + 1)
		return prev.snap, nil
	case missing && errors.Is(prevErr, fs.ErrNotExist):
		st.shown.Store(st.indexedSeq + 1)
		return nil, nil
	case missing:
		return nil, fmt.Errorf("file: load %s: %s is missing and %v: %w", agentID, curPath, prevErr, plugin.ErrCorrupt)
	case errors.Is(prevErr, fs.ErrNotExist):
		return nil, fmt.Errorf("file: load %s: %v (and there is no previous generation): %w", agentID, curErr, plugin.ErrCorrupt)
	default:
		return nil, fmt.Errorf("file: load %s: %v; %v: %w", agentID, curErr, prevErr, plugin.ErrCorrupt)
	}
}

// Delete removes every file of the agent.
func (s *Store) Delete(ctx context.Context, agentID string) error {
	if err := agent.ValidateID(agentID); err != nil {
		return fmt.Errorf("file: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("file: delete %s: %w", agentID, err)
	}
	st, err := s.lock(agentID)
	if err != nil {
		return fmt.Errorf("file: delete %s: %w", agentID, err)
	}
	defer st.mu.Unlock()
	st.known, st.results = false, nil
	for _, p := range []string{
		s.path(agentID, extCurrent), s.path(agentID, extPrev), s.path(agentID, extRejected), s.path(agentID, extResults),
		s.path(agentID, extCopy), s.tmpPath(agentID, extCurrent), s.tmpPath(agentID, extResults), s.tmpPath(agentID, extCopy),
	} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("file: delete %s: %w", agentID, err)
		}
	}
	if err := atomicfile.SyncDir(s.dir); err != nil {
		return fmt.Errorf("file: delete %s: %w", agentID, err)
	}
	return nil
}

// List returns the ids of the agents that have a current or previous file,
// sorted.
func (s *Store) List(ctx context.Context) ([]string, error) {
	if s.agents.Closed() {
		return nil, fmt.Errorf("file: list: %w", plugin.ErrClosed)
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("file: list: %w", err)
	}
	var ids []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || strings.HasPrefix(name, ".") {
			continue
		}
		base, ok := strings.CutSuffix(name, extCurrent)
		if !ok {
			base, ok = strings.CutSuffix(name, extPrev)
		}
		if id := idOf(base); ok && id != "" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// Close marks the store closed. It holds no open files between calls.
// Closing twice is not an error.
func (s *Store) Close() error {
	s.agents.Close()
	return nil
}

// writeSync writes data to a new file at path (replacing any) and fsyncs it.
// A file it could not write whole is removed.
func writeSync(path string, data []byte) error {
	return syncFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, true, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// appendSync appends data to the file at path, creating it, and fsyncs it.
func appendSync(path string, data []byte) error {
	return syncFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, false, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// truncateSync cuts the file at path to size bytes and fsyncs it.
func truncateSync(path string, size int64) error {
	return syncFile(path, os.O_WRONLY, false, func(f *os.File) error { return f.Truncate(size) })
}

// syncFile opens the file at path with flag (mode 0o600 when it creates
// it), changes it with change, fsyncs it and closes it. On an error after
// the file was opened it closes the file, and with remove removes it too.
func syncFile(path string, flag int, remove bool, change func(f *os.File) error) error {
	f, err := os.OpenFile(path, flag, 0o600)
	if err != nil {
		return err
	}
	err = change(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil && remove {
		os.Remove(path)
	}
	return err
}

// Interface guards.
var (
	_ plugin.Storage   = (*Store)(nil)
	_ plugin.TaskIndex = (*Store)(nil)
	_ plugin.Lister    = (*Store)(nil)
)
