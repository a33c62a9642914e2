package redis

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/backend"
	"github.com/openstarry/openstarry-edge/storage/redis/internal/resp"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "storage.redis",
		Description: "snapshots in a Redis server (durable with appendonly yes, appendfsync always)",
		New:         plugin.StorageOpener(openURL),
	})
	// The registry finds a store by its URL scheme; rediss:// is Redis
	// over TLS.
	plugin.Register(plugin.Info{
		ID:          "storage.rediss",
		Description: "snapshots in a Redis server over TLS (see storage.redis)",
		New:         plugin.StorageOpener(openURL),
	})
}

// DefaultPrefix starts every key when the URL names no prefix.
const DefaultPrefix = "openstarry:"

// These errors are returned by Save, wrapped with the agent and the details.
var (
	// ErrConflict is returned when the stored generation is not the one
	// this store last loaded or saved: another process saved the agent.
	// The error wraps plugin.ErrLocked too.
	ErrConflict = errors.New("generation conflict: another writer saved this agent")

	// ErrUnavailable is returned when the server could not be reached or
	// did not answer. The snapshot may or may not have been stored; the
	// caller must not acknowledge anything that depends on it.
	ErrUnavailable = errors.New("redis server unavailable")
)

//go:embed save.lua
var saveLua string

// saveScript is sent by its SHA, and with its source when the server does
// not know it.
var saveScript = resp.NewScript(saveLua)

// Options configure a Store.
type Options struct {
	// Logger receives the durability warning of Open and a warning for
	// each damaged record Load skips. The zero Logger discards them.
	Logger zerolog.Logger

	// Retention bounds the task index of each agent. A zero field takes
	// the value of plugin.DefaultRetention; a negative one means no limit.
	Retention plugin.Retention

	// Prefix starts every key. Default DefaultPrefix; a "prefix" URL
	// parameter overrides it.
	Prefix string

	// Now is the clock that stamps indexed results and ages them out.
	// Default time.Now.
	Now func() time.Time
}

// Store is the Redis snapshot store. It is safe for concurrent use; calls for
// one agent are expected from that agent's single owner goroutine.
type Store struct {
	c      *resp.Client
	addr   string
	prefix string
	log    zerolog.Logger
	ret    plugin.Retention
	now    func() time.Time
	// durability is "" when the server fsyncs every write (set at Open).
	durability string

	known backend.Agents[state] // per agent: what the next Save expects; refused after Close
}

// state is what the store knows of an agent's keys.
type state struct {
	gen     uint64 // the generation stored, which the next Save expects
	taskSeq uint64 // the stored taskseq mark
	curBad  bool   // cur failed its checks: overwrite it, keep prev
}

// openURL is the plugin opener.
func openURL(ctx context.Context, u *url.URL, env plugin.Env) (plugin.Storage, error) {
	return Open(ctx, u.String(), Options{Logger: env.Log})
}

// Open connects to the server named by rawURL (see the package
// documentation), checks that it answers, and reads its persistence
// settings.
func Open(ctx context.Context, rawURL string, o Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redis: open: %w", err)
	}
	safe := u.Redacted()
	ret := o.Retention
	// The retention and prefix parameters are the store's; the others are
	// the connection's (resp.Parameters).
	q, err := backend.ParseRetention(u.Query(), &ret)
	if err != nil {
		return nil, fmt.Errorf("redis: open %s: %w", safe, err)
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if vs := q["prefix"]; len(vs) > 0 {
		prefix = vs[len(vs)-1]
		q.Del("prefix")
	}
	u.RawQuery = q.Encode()
	opt, err := resp.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("redis: open %s: %w", safe, err)
	}
	// The client never sends a command twice: a Save resent after a lost
	// answer would meet its own generation and report a false conflict.
	// The caller retries the tick; Save reads the stored generation again
	// first.
	s := &Store{
		c:      resp.New(opt),
		addr:   opt.Addr,
		prefix: prefix,
		log:    o.Logger,
		ret:    backend.Retention(ret),
		now:    o.Now,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if _, err := s.c.Do(ctx, "PING"); err != nil {
		s.c.Close()
		return nil, fmt.Errorf("redis: open %s: %w: %w", safe, err, ErrUnavailable)
	}
	s.checkDurability(ctx)
	return s, nil
}

// checkDurability logs one warning line unless the server fsyncs its
// append-only file on every write, and keeps it for Durability.
func (s *Store) checkDurability(ctx context.Context) {
	const fix = `set "appendonly yes" and "appendfsync always" in redis.conf (or CONFIG SET appendonly yes, CONFIG SET appendfsync always, CONFIG REWRITE)`
	cfg := map[string]string{}
	var err error
	for _, k := range []string{"appendonly", "appendfsync"} {
		var r resp.Reply
		if r, err = s.c.Do(ctx, "CONFIG", "GET", k); err != nil {
			break
		}
		var kv []string
		if kv, err = r.Strings(); err != nil {
			break
		}
		for i := 0; i+1 < len(kv); i += 2 {
			cfg[kv[i]] = kv[i+1]
		}
	}
	switch {
	case err != nil:
		s.durability = fmt.Sprintf("cannot read the persistence settings (%v)", err)
		s.log.Warn().Str("addr", s.addr).Err(err).
			Msg(`redis: cannot read the persistence settings, so "fsync every tick" may not hold: ` + fix)
	case !strings.EqualFold(cfg["appendonly"], "yes") || !strings.EqualFold(cfg["appendfsync"], "always"):
		s.durability = fmt.Sprintf("appendonly %s, appendfsync %s: a crash of the Redis host can lose acknowledged ticks", cfg["appendonly"], cfg["appendfsync"])
		s.log.Warn().Str("addr", s.addr).Str("appendonly", cfg["appendonly"]).Str("appendfsync", cfg["appendfsync"]).
			Msg(`redis: "fsync every tick" does not hold: a crash of the Redis host can lose acknowledged ticks; ` + fix)
	}
}

// Durability implements plugin.Durability: "" when the server fsyncs every
// write, else why a Save may not survive a crash of the Redis host.
func (s *Store) Durability() string { return s.durability }

// Prefix returns the prefix of every key of the store.
func (s *Store) Prefix() string { return s.prefix }

// keys are the keys of one agent, in the order save.lua takes them.
func (s *Store) keys(id string) []string {
	a := s.prefix + "agent:" + id + ":"
	return []string{a + "meta", a + "cur", a + "prev", a + "tasks", a + "taskseq", a + "tasktime", s.prefix + "agents"}
}

const (
	kMeta = iota
	kCur
	kPrev
	kTasks
	kTaskSeq
	kTaskTime
	kAgents
)

// failed classifies an error of the client: ErrClosed after Close, the
// context's error, ErrUnavailable for a connection that failed, or the
// server's error as it is.
func (s *Store) failed(err error) error {
	var rerr resp.Error
	switch {
	case s.known.Closed():
		return plugin.ErrClosed
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.As(err, &rerr):
		return err
	}
	return fmt.Errorf("no answer from %s (%w): %w", s.addr, err, ErrUnavailable)
}

// Save stores snap as the agent's newest generation and indexes its new
// results, in one script call, and returns after the server answered.
func (s *Store) Save(ctx context.Context, snap *agent.Snapshot) error {
	if err := backend.CheckSave(ctx, "redis", snap); err != nil {
		return err
	}
	id := snap.AgentID
	st, err := s.known.Get(id)
	if err != nil {
		return fmt.Errorf("redis: save %s: %w", id, err)
	}
	keys := s.keys(id)
	if st == nil {
		// No Load in this process: learn the stored generation, and
		// whether cur is good enough to become prev.
		if st, err = s.inspect(ctx, keys); err != nil {
			return fmt.Errorf("redis: save %s: %w", id, s.failed(err))
		}
	}
	payload, err := agent.Encode(snap)
	if err != nil {
		return fmt.Errorf("redis: save %s: %w", id, err)
	}
	next := &state{gen: st.gen + 1}

	// The outbox results to index; see the package documentation.
	toIndex, taskSeq := backend.Unindexed(snap, st.taskSeq)
	next.taskSeq = taskSeq
	results := make([]any, 0, 3*len(toIndex))
	for _, r := range toIndex {
		data, err := encodeResult(r)
		if err != nil {
			return fmt.Errorf("redis: save %s: %w", id, err)
		}
		results = append(results, r.TaskID, r.Seq, data)
	}
	now := s.now().UnixMilli()
	p := backend.PruneFor(s.ret, now, len(toIndex))
	rotate := "1"
	if st.curBad {
		rotate = "0"
	}
	args := append([]any{
		id, strconv.FormatUint(st.gen, 10), strconv.FormatUint(next.gen, 10), rotate,
		encodeRecord(next.gen, payload), strconv.FormatUint(next.taskSeq, 10),
		now, p.Cutoff, p.MaxTasks, p.Budget, len(toIndex),
	}, results...)

	// Commit point: the server's answer, after its append-only file took
	// the script's writes (fsynced first with appendfsync always).
	_, err = saveScript.Run(ctx, s.c, keys, args...)
	if err != nil {
		s.known.Set(id, nil) // unknown outcome, or stale: read the generation again next time
		if msg, ok := strings.CutPrefix(err.Error(), "OSCONFLICT "); ok {
			return fmt.Errorf("redis: save %s: the server holds generation %s, this process last saw %d "+
				"(another process saved the agent; load it again): %w (%w)", id, msg, st.gen, ErrConflict, plugin.ErrLocked)
		}
		return fmt.Errorf("redis: save %s: the snapshot may not be stored: %w", id, s.failed(err))
	}
	s.known.Set(id, next)
	return nil
}

// inspect reads the stored generation and checks the current record.
func (s *Store) inspect(ctx context.Context, keys []string) (*state, error) {
	rs, err := s.c.Pipeline(ctx, []any{"HMGET", keys[kMeta], "gen", "taskseq"}, []any{"GET", keys[kCur]})
	if err != nil {
		return nil, err
	}
	st, err := parseMeta(rs[0])
	if err != nil {
		return nil, err
	}
	if b, err := rs[1].Bytes(); err == nil {
		_, _, derr := decodeRecord(b)
		st.curBad = derr != nil
	}
	return st, nil
}

// parseMeta reads the reply of HMGET meta gen taskseq; missing fields are
// zero.
func parseMeta(r resp.Reply) (*state, error) {
	vals, err := r.Strings()
	if err != nil {
		return nil, err
	}
	var st state
	for i, p := range []*uint64{&st.gen, &st.taskSeq} {
		if i >= len(vals) || r.Array[i].Null {
			continue
		}
		v := vals[i]
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("meta field %d is %q, not a number: %w", i, v, plugin.ErrCorrupt)
		}
		*p = n
	}
	return &st, nil
}

// Load returns the agent's newest good generation; see the package
// documentation.
func (s *Store) Load(ctx context.Context, agentID string) (*agent.Snapshot, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("redis: load: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redis: load %s: %w", agentID, err)
	}
	if _, err := s.known.Get(agentID); err != nil {
		return nil, fmt.Errorf("redis: load %s: %w", agentID, err)
	}
	keys := s.keys(agentID)
	rs, err := s.c.Pipeline(ctx, []any{"HMGET", keys[kMeta], "gen", "taskseq"}, []any{"GET", keys[kCur]}, []any{"GET", keys[kPrev]})
	if err != nil {
		return nil, fmt.Errorf("redis: load %s: %w", agentID, s.failed(err))
	}
	st, err := parseMeta(rs[0])
	if err != nil {
		return nil, fmt.Errorf("redis: load %s: %w", agentID, err)
	}

	var problems []string
	for i, r := range rs[1:] {
		name := keys[kCur+i]
		b, err := r.Bytes()
		if errors.Is(err, resp.ErrNil) {
			if i == 0 && st.gen > 0 {
				problems = append(problems, name+" is missing")
			}
			continue
		}
		_, snap, err := decodeRecord(b)
		if err == nil && snap.AgentID != agentID {
			err = fmt.Errorf("the record is of agent %q", snap.AgentID)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", name, err))
			s.log.Warn().Str("agent", agentID).Str("key", name).Err(err).Msg("redis: stored record is damaged")
			if i == 0 {
				st.curBad = true
			}
			continue
		}
		if i > 0 {
			s.log.Warn().Str("agent", agentID).Str("key", name).
				Msg("redis: loaded the previous generation; the current record is damaged or missing")
		}
		s.known.Set(agentID, st)
		return snap, nil
	}
	if len(problems) == 0 && st.gen == 0 {
		s.known.Set(agentID, st)
		return nil, nil
	}
	if len(problems) == 0 {
		problems = append(problems, fmt.Sprintf("generation %d is recorded but no record is stored", st.gen))
	}
	return nil, fmt.Errorf("redis: load %s: no good generation (%s): %w", agentID, strings.Join(problems, "; "), plugin.ErrCorrupt)
}

// Delete removes every key of the agent, in one transaction.
func (s *Store) Delete(ctx context.Context, agentID string) error {
	if err := agent.ValidateID(agentID); err != nil {
		return fmt.Errorf("redis: delete: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("redis: delete %s: %w", agentID, err)
	}
	if _, err := s.known.Get(agentID); err != nil {
		return fmt.Errorf("redis: delete %s: %w", agentID, err)
	}
	keys := s.keys(agentID)
	del := []any{"DEL"}
	for _, k := range keys[:kAgents] {
		del = append(del, k)
	}
	rs, err := s.c.Pipeline(ctx, []any{"MULTI"}, del, []any{"SREM", keys[kAgents], agentID}, []any{"EXEC"})
	if err == nil {
		for _, r := range rs {
			if err = r.Err(); err != nil {
				break
			}
		}
	}
	s.known.Set(agentID, nil)
	if err != nil {
		return fmt.Errorf("redis: delete %s: %w", agentID, s.failed(err))
	}
	return nil
}

// List returns the ids of the stored agents, sorted.
func (s *Store) List(ctx context.Context) ([]string, error) {
	if s.known.Closed() {
		return nil, fmt.Errorf("redis: list: %w", plugin.ErrClosed)
	}
	r, err := s.c.Do(ctx, "SMEMBERS", s.prefix+"agents")
	var ids []string
	if err == nil {
		ids, err = r.Strings()
	}
	if err != nil {
		return nil, fmt.Errorf("redis: list: %w", s.failed(err))
	}
	slices.Sort(ids)
	return ids, nil
}

// TaskResult returns the indexed result of a task of the agent.
func (s *Store) TaskResult(ctx context.Context, agentID, taskID string) (*agent.Result, error) {
	if err := agent.ValidateID(agentID); err != nil {
		return nil, fmt.Errorf("redis: task result: %w", err)
	}
	if _, err := s.known.Get(agentID); err != nil {
		return nil, fmt.Errorf("redis: task result %s/%s: %w", agentID, taskID, err)
	}
	reply, err := s.c.Do(ctx, "HGET", s.keys(agentID)[kTasks], taskID)
	var b []byte
	if err == nil {
		b, err = reply.Bytes()
	}
	if errors.Is(err, resp.ErrNil) {
		return nil, fmt.Errorf("redis: task result %s/%s: %w", agentID, taskID, plugin.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("redis: task result %s/%s: %w", agentID, taskID, s.failed(err))
	}
	r, err := decodeResult(b)
	if err != nil {
		return nil, fmt.Errorf("redis: task result %s/%s: %v: %w", agentID, taskID, err, plugin.ErrCorrupt)
	}
	return r, nil
}

// Close closes the connections. Closing twice is not an error.
func (s *Store) Close() error {
	if _, first := s.known.Close(); !first {
		return nil
	}
	if err := s.c.Close(); err != nil {
		return fmt.Errorf("redis: close %s: %w", s.addr, err)
	}
	return nil
}

// Interface guards.
var (
	_ plugin.Storage   = (*Store)(nil)
	_ plugin.TaskIndex = (*Store)(nil)
	_ plugin.Lister    = (*Store)(nil)
)
