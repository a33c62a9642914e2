package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/core/privfs"
)

func init() {
	Register(Tool{
		Name:        "file_append",
		Description: `Append args.line and a newline to args.file, a path inside the agent's artifacts directory. Not idempotent.`,
		Idempotent:  false,
		Parameters:  json.RawMessage(`{"type":"object","properties":{"file":{"type":"string"},"line":{"type":"string"}},"required":["file","line"],"additionalProperties":false}`),
		Run:         fileAppend,
	})
	Register(Tool{
		Name:        "sleep_ms",
		Description: `Wait args.ms milliseconds (at most 60,000). Idempotent.`,
		Idempotent:  true,
		Parameters:  json.RawMessage(`{"type":"object","properties":{"ms":{"type":"integer","minimum":0,"maximum":60000}},"required":["ms"],"additionalProperties":false}`),
		Run:         sleepMs,
	})
}

// DecodeArgs decodes a tool's JSON arguments strictly.
func DecodeArgs(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("bad arguments: %v", err)
	}
	return nil
}

// InsideDir resolves rel inside dir lexically, refusing absolute paths and
// any path that escapes dir by "..". It does not see symbolic links: file
// tools open paths through Artifacts, which does.
func InsideDir(dir, rel string) (string, error) {
	if rel == "" {
		return "", errors.New("empty path")
	}
	if filepath.IsAbs(rel) || strings.ContainsRune(rel, 0) {
		return "", fmt.Errorf("path %q must be relative to the artifacts directory", rel)
	}
	clean := filepath.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("path %q leaves the artifacts directory", rel)
	}
	return filepath.Join(dir, clean), nil
}

func fileAppend(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		File string `json:"file"`
		Line string `json:"line"`
	}
	if err := DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if strings.ContainsAny(args.Line, "\n\r") {
		return nil, errors.New("line must not contain a newline")
	}
	art, err := env.artifacts()
	if err != nil {
		return nil, err
	}
	if env.Artifacts == nil {
		defer art.Close()
	}
	f, err := art.OpenFile(args.File, os.O_WRONLY|os.O_APPEND|os.O_CREATE, privfs.FileMode)
	if err != nil {
		return nil, err
	}
	// One write call: a line is appended whole or not at all.
	n, err := f.Write([]byte(args.Line + "\n"))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(map[string]any{"file": args.File, "bytes": n})
}

func sleepMs(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		Ms int `json:"ms"`
	}
	if err := DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.Ms < 0 || args.Ms > 60000 {
		return nil, fmt.Errorf("ms must be between 0 and 60000, got %d", args.Ms)
	}
	t := time.NewTimer(time.Duration(args.Ms) * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
		return json.Marshal(map[string]int{"slept_ms": args.Ms})
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
