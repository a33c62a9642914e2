// Package fts is the local memory engine: documents in a SQLite FTS5 index,
// one file under the data directory, ranked with BM25. It needs no network
// and no model, so it works on an offline board.
//
// URL: fts:// is {DataDir}/memory.db; fts:///abs/path.db or fts://rel/path.db
// name the file. Every document lives in the collection named by the query
// parameter collection (default "default"), so agents that share a file can
// keep their knowledge apart or share it.
package fts

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"unicode"

	_ "modernc.org/sqlite" // the pure-Go SQLite driver, with FTS5

	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/storage/internal/sqlitedb"
)

func init() {
	plugin.Register(plugin.Info{
		ID:          "memory.fts",
		Description: "local long-term memory: SQLite FTS5 with BM25 ranking, one file, offline",
		New:         plugin.MemoryOpener(openURL),
	})
}

// Engine is an FTS5 memory engine over one SQLite file.
type Engine struct {
	db         *sql.DB
	path       string
	collection string
}

func openURL(ctx context.Context, u *url.URL, env plugin.Env) (memory.Engine, error) {
	path := plugin.URLPath(u)
	if path == "" {
		path = filepath.Join(env.DataDir, "memory.db")
	}
	coll := u.Query().Get("collection")
	if coll == "" {
		coll = "default"
	}
	return Open(ctx, path, coll)
}

// Open opens, creating it if needed, the index at path for one collection.
func Open(ctx context.Context, path, collection string) (*Engine, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("memory fts: %w", err)
	}
	db, _, err := sqlitedb.Open(abs, sqlitedb.Options{})
	if err != nil {
		return nil, fmt.Errorf("memory fts: open %s: %w", abs, err)
	}
	if err := sqlitedb.Migrate(ctx, db, [][]string{{schema}}); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("memory fts: %s: %w", abs, err)
	}
	return &Engine{db: db, path: abs, collection: collection}, nil
}

// The schema: docs holds what was stored; docs_fts indexes its text as an
// external-content FTS5 table kept in step by triggers.
const schema = `
CREATE TABLE IF NOT EXISTS docs (
	rowid      INTEGER PRIMARY KEY,
	collection TEXT NOT NULL,
	id         TEXT NOT NULL,
	text       TEXT NOT NULL,
	metadata   TEXT NOT NULL DEFAULT '{}',
	UNIQUE (collection, id)
);
CREATE VIRTUAL TABLE IF NOT EXISTS docs_fts USING fts5(text, content='docs', content_rowid='rowid', tokenize='unicode61');
CREATE TRIGGER IF NOT EXISTS docs_ai AFTER INSERT ON docs BEGIN
	INSERT INTO docs_fts(rowid, text) VALUES (new.rowid, new.text);
END;
CREATE TRIGGER IF NOT EXISTS docs_ad AFTER DELETE ON docs BEGIN
	INSERT INTO docs_fts(docs_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
END;
CREATE TRIGGER IF NOT EXISTS docs_au AFTER UPDATE ON docs BEGIN
	INSERT INTO docs_fts(docs_fts, rowid, text) VALUES ('delete', old.rowid, old.text);
	INSERT INTO docs_fts(rowid, text) VALUES (new.rowid, new.text);
END;
`

// Put stores d, replacing a document with the same ID.
func (e *Engine) Put(ctx context.Context, d memory.Doc) (string, error) {
	if err := memory.Check(&d); err != nil {
		return "", err
	}
	meta, err := encodeMeta(d.Metadata)
	if err != nil {
		return "", err
	}
	_, err = e.db.ExecContext(ctx, `INSERT INTO docs (collection, id, text, metadata) VALUES (?, ?, ?, ?)
		ON CONFLICT (collection, id) DO UPDATE SET text = excluded.text, metadata = excluded.metadata`,
		e.collection, d.ID, d.Text, meta)
	if err != nil {
		return "", fmt.Errorf("memory fts: put %s: %w", d.ID, err)
	}
	return d.ID, nil
}

// Search ranks the collection's documents against the words of query with
// BM25. Any text is a valid query: it is reduced to its words, each matched
// as a term, so FTS5's query syntax never reaches the engine from a model.
func (e *Engine) Search(ctx context.Context, query string, k int) ([]memory.Hit, error) {
	match := matchExpr(query)
	if match == "" {
		return []memory.Hit{}, nil
	}
	rows, err := e.db.QueryContext(ctx, `SELECT d.id, d.text, d.metadata, -bm25(docs_fts) AS score
		FROM docs_fts JOIN docs d ON d.rowid = docs_fts.rowid
		WHERE docs_fts MATCH ? AND d.collection = ?
		ORDER BY score DESC, d.id LIMIT ?`, match, e.collection, memory.ClampK(k))
	if err != nil {
		return nil, fmt.Errorf("memory fts: search: %w", err)
	}
	defer rows.Close()
	hits := []memory.Hit{}
	for rows.Next() {
		var h memory.Hit
		var meta string
		if err := rows.Scan(&h.ID, &h.Text, &meta, &h.Score); err != nil {
			return nil, fmt.Errorf("memory fts: search: %w", err)
		}
		if h.Metadata, err = decodeMeta(meta); err != nil {
			return nil, fmt.Errorf("memory fts: document %s: %w", h.ID, err)
		}
		hits = append(hits, h)
	}
	return hits, rows.Err()
}

// Delete removes the document with this ID from the collection.
func (e *Engine) Delete(ctx context.Context, id string) error {
	if _, err := e.db.ExecContext(ctx, `DELETE FROM docs WHERE collection = ? AND id = ?`, e.collection, id); err != nil {
		return fmt.Errorf("memory fts: delete %s: %w", id, err)
	}
	return nil
}

// Close closes the database.
func (e *Engine) Close() error { return e.db.Close() }

// matchExpr turns free text into an FTS5 expression: its words, each quoted,
// joined with OR (BM25 ranks documents matching more of them higher).
func matchExpr(q string) string {
	words := strings.FieldsFunc(strings.ToLower(q), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
	if len(words) > 64 {
		words = words[:64]
	}
	for i, w := range words {
		words[i] = `"` + w + `"`
	}
	return strings.Join(words, " OR ")
}

var errMeta = errors.New("metadata is not a JSON object of strings")
