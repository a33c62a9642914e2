// Package qdrant is the memory engine adapter to a Qdrant server over its HTTP
// API.
//
// Why Qdrant: it is one static binary with ARM builds that runs in a few tens
// of MiB beside the appliance or on a LAN server, its REST API is stable and
// versioned, and writes can wait for the commit (wait=true), which the memory
// contract needs (Put returns once the document is stored). Chroma, the other
// common choice, needs a Python runtime on the server.
//
// Ranking needs no embedding model: each document is indexed as a sparse
// vector of its words (a hashed term-frequency vector) in a collection whose
// sparse vectors carry Qdrant's IDF modifier, so Qdrant ranks by TF·IDF
// like the local fts engine's BM25. An operator with an embedding model can
// still point other tools at the same server.
//
// URL: qdrant://host:6333/collection (HTTP) or qdrants://host:6333/collection
// (HTTPS); ?api_key_env=NAME reads the API key from that environment
// variable (sent as the api-key header). The collection is created on first
// use.
package qdrant

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
	"unicode"

	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

func init() {
	for _, scheme := range []string{"qdrant", "qdrants"} {
		plugin.Register(plugin.Info{
			ID:          "memory." + scheme,
			Description: "long-term memory in a Qdrant server (sparse TF·IDF vectors, no embedding model needed)",
			New:         plugin.MemoryOpener(openURL),
		})
	}
}

// vectorName is the name of the sparse vector in the collection.
const vectorName = "words"

// Engine talks to one collection of one Qdrant server.
type Engine struct {
	base       string // http(s)://host:port
	collection string
	apiKey     string
	hc         *http.Client
}

func openURL(ctx context.Context, u *url.URL, env plugin.Env) (memory.Engine, error) {
	scheme := "http"
	if u.Scheme == "qdrants" {
		scheme = "https"
	}
	coll := strings.Trim(u.Path, "/")
	if coll == "" {
		coll = "openstarry"
	}
	var key string
	if name := u.Query().Get("api_key_env"); name != "" {
		if key = os.Getenv(name); key == "" {
			return nil, fmt.Errorf("memory qdrant: the environment variable %s named by api_key_env is empty", name)
		}
	}
	return Open(ctx, scheme+"://"+u.Host, coll, key)
}

// Open connects to the server at base (http://host:6333) and makes sure the
// collection exists with the sparse vector this adapter writes.
func Open(ctx context.Context, base, collection, apiKey string) (*Engine, error) {
	if strings.ContainsAny(collection, "/?#") || collection == "" || len(collection) > 255 {
		return nil, fmt.Errorf("memory qdrant: bad collection name %q", collection)
	}
	e := &Engine{base: strings.TrimRight(base, "/"), collection: collection, apiKey: apiKey,
		hc: &http.Client{Timeout: 30 * time.Second}}
	var info struct {
		Result struct {
			Config struct {
				Params struct {
					SparseVectors map[string]json.RawMessage `json:"sparse_vectors"`
				} `json:"params"`
			} `json:"config"`
		} `json:"result"`
	}
	err := e.call(ctx, http.MethodGet, "/collections/"+collection, nil, &info)
	var se *statusError
	switch {
	case err == nil:
		if _, ok := info.Result.Config.Params.SparseVectors[vectorName]; !ok {
			return nil, fmt.Errorf("memory qdrant: collection %s exists without the sparse vector %q this engine writes", collection, vectorName)
		}
		return e, nil
	case errors.As(err, &se) && se.code == http.StatusNotFound:
		body := map[string]any{"sparse_vectors": map[string]any{vectorName: map[string]any{"modifier": "idf"}}}
		if err := e.call(ctx, http.MethodPut, "/collections/"+collection, body, nil); err != nil {
			return nil, fmt.Errorf("memory qdrant: create collection %s: %w", collection, err)
		}
		return e, nil
	default:
		return nil, fmt.Errorf("memory qdrant: %w", err)
	}
}

type sparse struct {
	Indices []uint32  `json:"indices"`
	Values  []float32 `json:"values"`
}

// vectorize turns text into its sparse term-frequency vector: each lowercased
// word hashed (FNV-1a, 32 bits) to an index, its count the value.
func vectorize(text string) sparse {
	counts := map[uint32]float32{}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	}) {
		h := fnv.New32a()
		_, _ = h.Write([]byte(w))
		counts[h.Sum32()]++
	}
	v := sparse{Indices: make([]uint32, 0, len(counts)), Values: make([]float32, 0, len(counts))}
	for i := range counts {
		v.Indices = append(v.Indices, i)
	}
	sort.Slice(v.Indices, func(a, b int) bool { return v.Indices[a] < v.Indices[b] })
	for _, i := range v.Indices {
		v.Values = append(v.Values, counts[i])
	}
	return v
}

// pointID maps a document ID to the UUID Qdrant requires, the same for the
// same ID, so storing a document again replaces it.
func pointID(id string) string {
	s := sha256.Sum256([]byte("openstarry-memory\x00" + id))
	s[6] = s[6]&0x0f | 0x50 // version 5 style: name-based
	s[8] = s[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", s[0:4], s[4:6], s[6:8], s[8:10], s[10:16])
}

type payload struct {
	DocID    string            `json:"doc_id"`
	Text     string            `json:"text"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Put upserts d and waits until Qdrant has applied it.
func (e *Engine) Put(ctx context.Context, d memory.Doc) (string, error) {
	if err := memory.Check(&d); err != nil {
		return "", err
	}
	body := map[string]any{"points": []any{map[string]any{
		"id":      pointID(d.ID),
		"vector":  map[string]any{vectorName: vectorize(d.Text)},
		"payload": payload{DocID: d.ID, Text: d.Text, Metadata: d.Metadata},
	}}}
	if err := e.call(ctx, http.MethodPut, "/collections/"+e.collection+"/points?wait=true", body, nil); err != nil {
		return "", fmt.Errorf("memory qdrant: put %s: %w", d.ID, err)
	}
	return d.ID, nil
}

// Search queries the collection with the query's sparse vector.
func (e *Engine) Search(ctx context.Context, query string, k int) ([]memory.Hit, error) {
	v := vectorize(query)
	if len(v.Indices) == 0 {
		return []memory.Hit{}, nil
	}
	body := map[string]any{"query": v, "using": vectorName, "limit": memory.ClampK(k), "with_payload": true}
	var out struct {
		Result struct {
			Points []struct {
				Score   float64 `json:"score"`
				Payload payload `json:"payload"`
			} `json:"points"`
		} `json:"result"`
	}
	if err := e.call(ctx, http.MethodPost, "/collections/"+e.collection+"/points/query", body, &out); err != nil {
		return nil, fmt.Errorf("memory qdrant: search: %w", err)
	}
	hits := make([]memory.Hit, 0, len(out.Result.Points))
	for _, p := range out.Result.Points {
		if p.Payload.DocID == "" {
			continue // a point this engine did not write
		}
		hits = append(hits, memory.Hit{Doc: memory.Doc{ID: p.Payload.DocID, Text: p.Payload.Text, Metadata: p.Payload.Metadata}, Score: p.Score})
	}
	return hits, nil
}

// Delete removes the document and waits until Qdrant has applied it.
func (e *Engine) Delete(ctx context.Context, id string) error {
	body := map[string]any{"points": []string{pointID(id)}}
	if err := e.call(ctx, http.MethodPost, "/collections/"+e.collection+"/points/delete?wait=true", body, nil); err != nil {
		return fmt.Errorf("memory qdrant: delete %s: %w", id, err)
	}
	return nil
}

// Close releases idle connections.
func (e *Engine) Close() error {
	e.hc.CloseIdleConnections()
	return nil
}

type statusError struct {
	code int
	msg  string
}

func (s *statusError) Error() string { return fmt.Sprintf("qdrant answered %d: %s", s.code, s.msg) }

const maxResponse = 16 << 20

func (e *Engine) call(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if e.apiKey != "" {
		req.Header.Set("api-key", e.apiKey)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var qe struct {
			Status struct {
				Error string `json:"error"`
			} `json:"status"`
		}
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &qe) == nil && qe.Status.Error != "" {
			msg = qe.Status.Error
		}
		if len(msg) > 512 {
			msg = msg[:512]
		}
		return &statusError{code: resp.StatusCode, msg: msg}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("qdrant's answer is not the JSON expected: %w", err)
	}
	return nil
}
