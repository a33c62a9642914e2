package qdrant

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/openstarry/openstarry-edge/core/memory"
	"github.com/openstarry/openstarry-edge/core/plugin"
)

// server serves the part of Qdrant's HTTP API (v1.10+) the adapter uses, with
// Qdrant's semantics: collections with a named sparse vector and the IDF
// modifier, upsert and delete by point id, and the query endpoint scoring by
// the dot product of the query with each point's vector, IDF-weighted.
type server struct {
	mu          sync.Mutex
	apiKey      string
	collections map[string]map[string]point // collection → point id → point
	sparse      map[string]map[string]any   // collection → sparse vector config
}

type point struct {
	vec     sparse
	payload json.RawMessage
}

func newServer(t *testing.T, apiKey string) (*server, *httptest.Server) {
	s := &server{apiKey: apiKey, collections: map[string]map[string]point{}, sparse: map[string]map[string]any{}}
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	return s, hs
}

func (s *server) fail(w http.ResponseWriter, code int, msg string) {
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"status": map[string]string{"error": msg}})
}

func (s *server) ok(w http.ResponseWriter, result any) {
	_ = json.NewEncoder(w).Encode(map[string]any{"status": "ok", "result": result})
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.apiKey != "" && r.Header.Get("api-key") != s.apiKey {
		s.fail(w, http.StatusUnauthorized, "Must provide an API key or an Authorization bearer token")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) < 2 || parts[0] != "collections" {
		s.fail(w, http.StatusNotFound, "no route")
		return
	}
	name := parts[1]
	pts, exists := s.collections[name]
	rest := strings.Join(parts[2:], "/")
	switch {
	case rest == "" && r.Method == http.MethodGet:
		if !exists {
			s.fail(w, http.StatusNotFound, "Collection `"+name+"` doesn't exist!")
			return
		}
		s.ok(w, map[string]any{"config": map[string]any{"params": map[string]any{"sparse_vectors": s.sparse[name]}}})
	case rest == "" && r.Method == http.MethodPut:
		if exists {
			s.fail(w, http.StatusConflict, "Collection `"+name+"` already exists!")
			return
		}
		var body struct {
			SparseVectors map[string]any `json:"sparse_vectors"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.fail(w, http.StatusBadRequest, err.Error())
			return
		}
		s.collections[name] = map[string]point{}
		s.sparse[name] = body.SparseVectors
		s.ok(w, true)
	case !exists:
		s.fail(w, http.StatusNotFound, "Collection `"+name+"` doesn't exist!")
	case rest == "points" && r.Method == http.MethodPut:
		if r.URL.Query().Get("wait") != "true" {
			s.fail(w, http.StatusBadRequest, "test server: the adapter must wait for the write")
			return
		}
		var body struct {
			Points []struct {
				ID      string            `json:"id"`
				Vector  map[string]sparse `json:"vector"`
				Payload json.RawMessage   `json:"payload"`
			} `json:"points"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.fail(w, http.StatusBadRequest, err.Error())
			return
		}
		for _, p := range body.Points {
			v, ok := p.Vector[vectorName]
			if !ok || len(v.Indices) != len(v.Values) {
				s.fail(w, http.StatusBadRequest, "bad sparse vector")
				return
			}
			pts[p.ID] = point{vec: v, payload: p.Payload}
		}
		s.ok(w, map[string]any{"status": "completed"})
	case rest == "points/delete" && r.Method == http.MethodPost:
		var body struct {
			Points []string `json:"points"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			s.fail(w, http.StatusBadRequest, err.Error())
			return
		}
		for _, id := range body.Points {
			delete(pts, id)
		}
		s.ok(w, map[string]any{"status": "completed"})
	case rest == "points/query" && r.Method == http.MethodPost:
		var body struct {
			Query       sparse `json:"query"`
			Using       string `json:"using"`
			Limit       int    `json:"limit"`
			WithPayload bool   `json:"with_payload"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Using != vectorName {
			s.fail(w, http.StatusBadRequest, "bad query")
			return
		}
		df := map[uint32]int{}
		for _, p := range pts {
			for _, i := range p.vec.Indices {
				df[i]++
			}
		}
		type scored struct {
			ID      string          `json:"id"`
			Score   float64         `json:"score"`
			Payload json.RawMessage `json:"payload,omitempty"`
		}
		var out []scored
		for id, p := range pts {
			score := 0.0
			for qi, idx := range body.Query.Indices {
				for pi, pidx := range p.vec.Indices {
					if pidx == idx {
						idf := math.Log(1 + (float64(len(pts))-float64(df[idx])+0.5)/(float64(df[idx])+0.5))
						score += float64(body.Query.Values[qi]) * float64(p.vec.Values[pi]) * idf
					}
				}
			}
			if score > 0 {
				sc := scored{ID: id, Score: score}
				if body.WithPayload {
					sc.Payload = p.payload
				}
				out = append(out, sc)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i].Score > out[j].Score })
		if len(out) > body.Limit {
			out = out[:body.Limit]
		}
		s.ok(w, map[string]any{"points": out})
	default:
		s.fail(w, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
	}
}

func TestAdapter(t *testing.T) {
	ctx := context.Background()
	srv, hs := newServer(t, "k3y")
	t.Setenv("QDRANT_KEY", "k3y")
	u, _ := url.Parse("qdrant://" + strings.TrimPrefix(hs.URL, "http://") + "/notes?api_key_env=QDRANT_KEY")
	e, err := openURL(ctx, u, plugin.Env{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	if _, ok := srv.sparse["notes"][vectorName]; !ok {
		t.Fatalf("collection created without the sparse vector: %v", srv.sparse)
	}
	for _, d := range []memory.Doc{
		{ID: "pump", Text: "The pump fails when the pressure drops", Metadata: map[string]string{"site": "gh2"}},
		{ID: "valve", Text: "Valve 7 sticks in cold weather"},
		{ID: "both", Text: "pump pressure pump pressure and the valve"},
	} {
		if _, err := e.Put(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Put(ctx, memory.Doc{ID: "valve", Text: "Valve 7 replaced in March"}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.collections["notes"]); n != 3 {
		t.Fatalf("%d points after replacing one, want 3", n)
	}
	hits, err := e.Search(ctx, "pump pressure", 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(hits) != 2 || hits[0].ID != "both" || hits[1].Metadata["site"] != "gh2" {
		t.Fatalf("hits = %+v", hits)
	}
	if err := e.Delete(ctx, "both"); err != nil {
		t.Fatal(err)
	}
	if hits, _ := e.Search(ctx, "pump", 5); len(hits) != 1 || hits[0].ID != "pump" {
		t.Fatalf("after delete: %+v", hits)
	}

	// Reopening finds the collection; a wrong key is a clear error.
	if _, err := Open(ctx, hs.URL, "notes", "k3y"); err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if _, err := Open(ctx, hs.URL, "notes", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong key: %v", err)
	}
	t.Setenv("EMPTY_KEY", "")
	u2, _ := url.Parse("qdrant://" + strings.TrimPrefix(hs.URL, "http://") + "/notes?api_key_env=EMPTY_KEY")
	if _, err := openURL(ctx, u2, plugin.Env{}); err == nil || !strings.Contains(err.Error(), "EMPTY_KEY") {
		t.Fatalf("empty key variable: %v", err)
	}
	// A collection made by someone else, without our vector, is refused.
	srv.collections["foreign"], srv.sparse["foreign"] = map[string]point{}, map[string]any{}
	if _, err := Open(ctx, hs.URL, "foreign", "k3y"); err == nil || !strings.Contains(err.Error(), "without the sparse vector") {
		t.Fatalf("foreign collection: %v", err)
	}
	// An unreachable server is an error at open, not at the first task.
	hs2 := httptest.NewServer(http.NotFoundHandler())
	hs2.Close()
	if _, err := Open(ctx, hs2.URL, "notes", ""); err == nil {
		t.Fatal("open against a closed server succeeded")
	}
}

func TestPointIDIsStableUUID(t *testing.T) {
	a, b := pointID("n1"), pointID("n1")
	if a != b || pointID("n2") == a || len(a) != 36 || a[14] != '5' {
		t.Fatalf("point ids %q %q %q", a, b, pointID("n2"))
	}
}

func TestVectorize(t *testing.T) {
	v := vectorize("Pump pump, PUMP! valve")
	if len(v.Indices) != 2 || len(v.Values) != 2 {
		t.Fatalf("vector %+v", v)
	}
	sum := v.Values[0] + v.Values[1]
	if sum != 4 {
		t.Fatalf("term counts %+v, want 3 and 1", v)
	}
	if len(vectorize(" ,.! ").Indices) != 0 {
		t.Fatal("punctuation made terms")
	}
}

func FuzzVectorize(f *testing.F) {
	for _, s := range []string{"pump pressure", "", "日本語 テキスト", "a a a b", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v := vectorize(s)
		if len(v.Indices) != len(v.Values) {
			t.Fatalf("%d indices, %d values", len(v.Indices), len(v.Values))
		}
		for i := range v.Indices {
			if v.Values[i] < 1 || (i > 0 && v.Indices[i] <= v.Indices[i-1]) {
				t.Fatalf("vector %+v not sorted, unique and positive", v)
			}
		}
	})
}
