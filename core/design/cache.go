package design

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

// The cache holds, per template, the last good copy the design layer served:
//
//	{CacheDir}/{name}.json       the exact bytes of the response body
//	{CacheDir}/{name}.meta.json  cacheMeta: etag, signature, fetched_at, digest, ...
//
// Both are written atomically (temp file, fsync, rename, fsync of the
// directory), the body first and the sidecar last: the sidecar is the commit
// point. A crash between the two renames leaves a body whose digest does not
// match its sidecar; that entry is refused on use and replaced by the next
// successful fetch, never booted.

// cacheMeta is the {name}.meta.json sidecar.
type cacheMeta struct {
	Name      string    `json:"name"`
	Version   string    `json:"version"`
	Digest    string    `json:"digest"`              // Digest of {name}.json
	ETag      string    `json:"etag,omitempty"`      // as the design layer sent it, quotes included
	Signature string    `json:"signature,omitempty"` // the X-Openstarry-Signature value
	FetchedAt time.Time `json:"fetched_at"`          // last time the design layer served or confirmed (304) these bytes
	URL       string    `json:"url"`                 // where they came from
}

// cacheEntry is a cache entry that passed every check.
type cacheEntry struct {
	raw  []byte
	meta cacheMeta
	t    *Template
	path string
}

// errNoCache is returned by readCache when there is no entry at all.
var errNoCache = errors.New("no cached copy")

func cachePaths(dir, name string) (data, meta string) {
	return filepath.Join(dir, name+".json"), filepath.Join(dir, name+".meta.json")
}

// readCache loads and re-checks the entry for name: the body must match the
// sidecar's digest, validate, carry the requested name and, when keys are
// given, verify against them. Any failure other than a missing entry wraps
// ErrCacheInvalid.
func readCache(dir, name string, v Validator, keys []ed25519.PublicKey) (*cacheEntry, error) {
	dataPath, metaPath := cachePaths(dir, name)
	raw, err := readFileLimit(dataPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoCache
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCacheInvalid, dataPath, err)
	}
	mb, err := readFileLimit(metaPath)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: sidecar %s: %v", ErrCacheInvalid, dataPath, metaPath, err)
	}
	var m cacheMeta
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: sidecar %s is not valid JSON: %v", ErrCacheInvalid, dataPath, metaPath, err)
	}
	if got := Digest(raw); got != m.Digest {
		return nil, fmt.Errorf("%w: %s changed after it was fetched (digest %s, recorded %s)", ErrCacheInvalid, dataPath, got, m.Digest)
	}
	if len(keys) > 0 {
		if err := Verify(keys, raw, m.Signature); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrCacheInvalid, dataPath, err)
		}
	}
	t, err := v.Validate(dataPath, raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s no longer validates:\n%w", ErrCacheInvalid, dataPath, err)
	}
	if t.Name != name {
		return nil, fmt.Errorf("%w: %s holds template %q", ErrCacheInvalid, dataPath, t.Name)
	}
	return &cacheEntry{raw: raw, meta: m, t: t, path: dataPath}, nil
}

// writeCache stores raw and its sidecar atomically, body first.
func writeCache(dir, name string, raw []byte, m cacheMeta) error {
	if err := privfs.MkdirAll(dir); err != nil {
		return fmt.Errorf("design: cache: %w", err)
	}
	dataPath, metaPath := cachePaths(dir, name)
	if err := atomicfile.WriteFile(dataPath, raw, privfs.FileMode); err != nil {
		return err
	}
	return writeMeta(metaPath, m)
}

func writeMeta(path string, m cacheMeta) error {
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("design: cache: %w", err)
	}
	return atomicfile.WriteFile(path, append(mb, '\n'), privfs.FileMode)
}

// removeCache deletes an entry, sidecar first so that a crash in between
// leaves a body without a sidecar, which is refused.
func removeCache(dir, name string) error {
	dataPath, metaPath := cachePaths(dir, name)
	var errs []error
	for _, p := range []string{metaPath, dataPath} {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := atomicfile.SyncDir(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func readFileLimit(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllLimit(f, MaxTemplateBytes)
}

// errTooLarge is returned by readAllLimit for input over its limit.
var errTooLarge = errors.New("too large")

// readAllLimit reads r to its end, failing with errTooLarge when it holds
// more than limit bytes.
func readAllLimit(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: larger than the %d byte limit", errTooLarge, limit)
	}
	return data, nil
}
