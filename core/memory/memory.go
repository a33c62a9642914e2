// Package memory owns the interface of long-term memory engines: knowledge an
// agent keeps across tasks and restarts that is not part of its state.
//
// Seed 002 §4 separates the two. State (the AgentSnapshot) is what the agent
// needs to continue the work in hand, saved whole at every tick; Memory is
// what it has learned, searched when relevant and never loaded whole. So
// memory lives in an engine of its own (the plugin kind "memory"), reached by
// tools (memory_store, memory_search, memory_delete), and a document stored
// there never makes the snapshot larger.
//
// Engines are opened by URL through core/plugin, like stores: fts:// is a
// local SQLite FTS5 file under the data directory that works offline;
// qdrant:// is an adapter to a Qdrant server's HTTP API.
package memory

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Doc is one document an agent remembers.
type Doc struct {
	// ID names the document; storing a document with an existing ID
	// replaces it. Empty means "derive one from the text", so storing the
	// same text twice keeps one copy.
	ID       string            `json:"id"`
	Text     string            `json:"text"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Hit is one search result, best first. Score is engine-specific but higher
// is always better.
type Hit struct {
	Doc
	Score float64 `json:"score"`
}

// Engine is a memory engine. Implementations are safe for concurrent use.
type Engine interface {
	// Put stores d durably (it returns after the engine committed it) and
	// returns its ID.
	Put(ctx context.Context, d Doc) (string, error)
	// Search returns at most k documents matching query, best first.
	Search(ctx context.Context, query string, k int) ([]Hit, error)
	// Delete removes the document; a missing ID is not an error.
	Delete(ctx context.Context, id string) error
	Close() error
}

// Limits on what an agent may put in memory through one call.
const (
	MaxTextBytes = 64 << 10
	MaxIDBytes   = 128
	MaxMetadata  = 32
	MaxK         = 100
)

// ErrInvalid is wrapped by Check for a document that cannot be stored.
var ErrInvalid = errors.New("invalid memory document")

// Check validates d and fills in its ID from the text when it is empty.
func Check(d *Doc) error {
	if d.Text == "" {
		return fmt.Errorf("%w: text is empty", ErrInvalid)
	}
	if len(d.Text) > MaxTextBytes {
		return fmt.Errorf("%w: text is %d bytes, at most %d", ErrInvalid, len(d.Text), MaxTextBytes)
	}
	if len(d.ID) > MaxIDBytes {
		return fmt.Errorf("%w: id is %d bytes, at most %d", ErrInvalid, len(d.ID), MaxIDBytes)
	}
	if len(d.Metadata) > MaxMetadata {
		return fmt.Errorf("%w: %d metadata keys, at most %d", ErrInvalid, len(d.Metadata), MaxMetadata)
	}
	if d.ID == "" {
		sum := sha256.Sum256([]byte(d.Text))
		d.ID = "doc_" + hex.EncodeToString(sum[:12])
	}
	return nil
}

// ClampK bounds a requested result count to 1..MaxK (0 means 5).
func ClampK(k int) int {
	switch {
	case k <= 0:
		return 5
	case k > MaxK:
		return MaxK
	}
	return k
}
