package tool

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

func init() {
	Register(Tool{
		Name: "file_read",
		Description: `Read a text file inside the agent's artifacts directory. args: {"path": relative path, ` +
			`"offset": optional byte offset, "max_bytes": optional, at most 262144, default 65536}. Idempotent.`,
		Idempotent: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"path relative to the artifacts directory"},` +
			`"offset":{"type":"integer","minimum":0},"max_bytes":{"type":"integer","minimum":1,"maximum":262144}},"required":["path"],"additionalProperties":false}`),
		Run: fileRead,
	})
	Register(Tool{
		Name: "file_write",
		Description: `Write a whole text file inside the agent's artifacts directory, replacing it if it exists ` +
			`(written to a temporary file, synced, then renamed). args: {"path": relative path, "content": text}. ` +
			`Idempotent: writing the same content again changes nothing.`,
		Idempotent: true,
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"path relative to the artifacts directory"},` +
			`"content":{"type":"string"}},"required":["path","content"],"additionalProperties":false}`),
		Run: fileWrite,
	})
}

// File tool limits.
const (
	defaultReadBytes = 64 << 10
	maxReadBytes     = 256 << 10
	maxWriteBytes    = 1 << 20
)

// rootPath checks a model-given path and returns it in the slash form
// os.Root takes. The os.Root opened on the artifacts directory is what
// confines the access (symbolic links included); this check only gives the
// model a clear error for the obvious mistakes.
func rootPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("bad arguments: path is empty")
	}
	if strings.ContainsRune(p, 0) || filepath.IsAbs(p) || path.IsAbs(p) || filepath.VolumeName(p) != "" {
		return "", fmt.Errorf("bad arguments: path %q must be relative to the artifacts directory", p)
	}
	clean := path.Clean(filepath.ToSlash(p))
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("bad arguments: path %q leaves the artifacts directory", p)
	}
	return clean, nil
}

// openArtifacts opens the artifacts directory as an os.Root, creating it
// (0700) when missing.
func openArtifacts(env Env) (*os.Root, error) {
	if env.ArtifactsDir == "" {
		return nil, errors.New("this agent has no artifacts directory")
	}
	if err := os.MkdirAll(env.ArtifactsDir, 0o700); err != nil {
		return nil, err
	}
	return os.OpenRoot(env.ArtifactsDir)
}

func fileRead(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		Path     string `json:"path"`
		Offset   int64  `json:"offset"`
		MaxBytes int    `json:"max_bytes"`
	}
	if err := DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	p, err := rootPath(args.Path)
	if err != nil {
		return nil, err
	}
	if args.Offset < 0 {
		return nil, fmt.Errorf("bad arguments: offset must not be negative, got %d", args.Offset)
	}
	if args.MaxBytes == 0 {
		args.MaxBytes = defaultReadBytes
	}
	if args.MaxBytes < 0 || args.MaxBytes > maxReadBytes {
		return nil, fmt.Errorf("bad arguments: max_bytes must be between 1 and %d, got %d", maxReadBytes, args.MaxBytes)
	}
	root, err := openArtifacts(env)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(p)
	if err != nil {
		return nil, relErr(err, args.Path)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, relErr(err, args.Path)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", args.Path)
	}
	buf := make([]byte, args.MaxBytes)
	n, err := f.ReadAt(buf, args.Offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, relErr(err, args.Path)
	}
	buf = buf[:n]
	if !utf8.Valid(buf) {
		// Cut a rune split at the end; anything else is binary.
		for cut := len(buf) - 1; cut >= 0 && cut >= len(buf)-3; cut-- {
			if utf8.Valid(buf[:cut]) {
				buf, n = buf[:cut], cut
				break
			}
		}
		if !utf8.Valid(buf) {
			return nil, fmt.Errorf("%s is not UTF-8 text", args.Path)
		}
	}
	end := args.Offset + int64(n)
	return json.Marshal(map[string]any{"path": args.Path, "offset": args.Offset, "bytes": n,
		"size": st.Size(), "eof": end >= st.Size(), "content": string(buf)})
}

func fileWrite(ctx context.Context, env Env, raw json.RawMessage) (json.RawMessage, error) {
	var args struct {
		Path    *string `json:"path"`
		Content *string `json:"content"`
	}
	if err := DecodeArgs(raw, &args); err != nil {
		return nil, err
	}
	if args.Path == nil || args.Content == nil {
		return nil, errors.New(`bad arguments: want {"path": ..., "content": ...}`)
	}
	p, err := rootPath(*args.Path)
	if err != nil {
		return nil, err
	}
	if len(*args.Content) > maxWriteBytes {
		return nil, fmt.Errorf("bad arguments: content is %d bytes, more than %d", len(*args.Content), maxWriteBytes)
	}
	root, err := openArtifacts(env)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o700); err != nil {
			return nil, relErr(err, *args.Path)
		}
	}
	tmp := p + ".tmp-" + env.TaskID
	if env.TaskID == "" || strings.ContainsAny(env.TaskID, `/\`) {
		tmp = p + ".tmp"
	}
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, relErr(err, *args.Path)
	}
	_, err = f.Write([]byte(*args.Content))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, p)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return nil, relErr(err, *args.Path)
	}
	if d, err := root.Open(path.Dir(p)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return json.Marshal(map[string]any{"path": *args.Path, "bytes": len(*args.Content)})
}

// relErr reports a file error without the artifacts directory's absolute
// path, which the model has no use for.
func relErr(err error, rel string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %s %w", rel, pe.Op, pe.Err)
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return fmt.Errorf("%s: %s %w", rel, le.Op, le.Err)
	}
	return fmt.Errorf("%s: %w", rel, err)
}
