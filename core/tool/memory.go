package tool

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/openstarry/openstarry-edge/core/memory"
)

// ServiceMemory is the Env.Services key of the agent's memory engine, opened
// by the host from the template's "memory" URL.
const ServiceMemory = "memory"

func init() {
	Register(Tool{
		Name: "memory_store",
		Description: `Remember args.text (with optional args.metadata, an object of strings, and args.id) in long-term memory. ` +
			`Storing the same id (or, without one, the same text) again replaces it, so it is idempotent. Answers {"id"}.`,
		Idempotent: true,
		Run:        memoryStore,
	})
	Register(Tool{
		Name:        "memory_search",
		Description: `Search long-term memory for args.query; args.k results at most (default 5, at most 100), best first, each {"id","text","metadata","score"}. Read-only.`,
		Idempotent:  true,
		Run:         memorySearch,
	})
	Register(Tool{
		Name:        "memory_delete",
		Description: `Forget the document args.id from long-term memory. Idempotent.`,
		Idempotent:  true,
		Run:         memoryDelete,
	})
}

var errNoMemory = errors.New(`this agent has no memory engine: its template must name one ("memory": "fts://")`)

func engine(env Env) (memory.Engine, error) {
	m, _ := env.Services[ServiceMemory].(memory.Engine)
	if m == nil {
		return nil, errNoMemory
	}
	return m, nil
}

func memoryStore(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var d memory.Doc
	if err := DecodeArgs(raw, &d); err != nil {
		return nil, err
	}
	if err := memory.Check(&d); err != nil {
		return nil, err
	}
	m, err := engine(env)
	if err != nil {
		return nil, err
	}
	id, err := m.Put(ctx, d)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"id": id})
}

func memorySearch(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		Query string `json:"query"`
		K     int    `json:"k"`
	}
	if err := DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.Query == "" {
		return nil, errors.New("bad arguments: query is empty")
	}
	m, err := engine(env)
	if err != nil {
		return nil, err
	}
	hits, err := m.Search(ctx, args.Query, args.K)
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"hits": hits})
}

func memoryDelete(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		ID string `json:"id"`
	}
	if err := DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.ID == "" {
		return nil, errors.New("bad arguments: id is empty")
	}
	m, err := engine(env)
	if err != nil {
		return nil, err
	}
	if err := m.Delete(ctx, args.ID); err != nil {
		return nil, err
	}
	return json.Marshal(map[string]string{"deleted": args.ID})
}
