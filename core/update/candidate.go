package update

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/openstarry/openstarry-edge/core/atomicfile"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/release"
)

// Info is what a binary says of itself with `version --json`: what an
// update compares before the swap.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Date    string `json:"date,omitempty"`
	GOOS    string `json:"goos"`
	GOARCH  string `json:"goarch"`
	GOARM   string `json:"goarm,omitempty"`
	// SnapshotSchema is the schema_version of the snapshots the binary
	// writes; SnapshotSchemaRead the newest it loads (it loads every
	// older one).
	SnapshotSchema     int `json:"snapshot_schema"`
	SnapshotSchemaRead int `json:"snapshot_schema_read"`
}

// These errors are wrapped by what refuses a candidate.
var (
	// ErrUnsigned is returned when SHA256SUMS is not signed by a trusted
	// key, or does not list the candidate with its digest.
	ErrUnsigned = errors.New("update not signed by a trusted fleet key")
	// ErrPlatform is returned when the candidate is built for another
	// platform.
	ErrPlatform = errors.New("update built for another platform")
	// ErrIncompatible is returned when the candidate writes snapshots the
	// running version could not read after a rollback.
	ErrIncompatible = errors.New("update incompatible with this version's snapshots")
	// ErrBusy is returned when an update is already on trial.
	ErrBusy = errors.New("an update is already in progress")
)

// Limits of what a candidate may be.
const (
	MaxBinary = 512 << 20
	maxSmall  = 1 << 20
)

// Candidate is a verified binary at Paths.New.
type Candidate struct {
	Source string
	SHA256 string
	Info   Info
}

// Fetcher reads a candidate and the signed SHA256SUMS beside it.
type Fetcher struct {
	HTTP *http.Client // nil: a client with a 10-minute timeout
}

// open returns a reader of name beside the binary from (a path, a file://
// or an http(s):// URL): name "" is the binary itself.
func (f Fetcher) open(ctx context.Context, from, name string, limit int64) (io.ReadCloser, error) {
	u, err := url.Parse(from)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		if name != "" {
			v := *u
			v.Path = path.Join(path.Dir(u.Path), name)
			v.RawQuery = ""
			u = &v
		}
		req, err := http.NewRequestWithContext(ctx, "GET", u.String(), nil)
		if err != nil {
			return nil, err
		}
		hc := f.HTTP
		if hc == nil {
			hc = &http.Client{Timeout: 10 * time.Minute}
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: %s", u.Redacted(), resp.Status)
		}
		if resp.ContentLength > limit {
			resp.Body.Close()
			return nil, fmt.Errorf("GET %s: %d bytes, at most %d", u.Redacted(), resp.ContentLength, limit)
		}
		return resp.Body, nil
	}
	p := from
	if err == nil && u.Scheme == "file" {
		p = u.Path
	} else if err == nil && u.Scheme != "" && len(u.Scheme) > 1 {
		return nil, fmt.Errorf("%q: want a file, file://, http:// or https:// URL", from)
	}
	if name != "" {
		p = filepath.Join(filepath.Dir(p), name)
	}
	return os.Open(p)
}

func (f Fetcher) small(ctx context.Context, from, name string) ([]byte, error) {
	r, err := f.open(ctx, from, name, maxSmall)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, maxSmall+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxSmall {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxSmall)
	}
	return b, nil
}

// baseName is the file name of from, as SHA256SUMS lists it.
func baseName(from string) string {
	if u, err := url.Parse(from); err == nil && (u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "file") {
		return path.Base(u.Path)
	}
	return filepath.Base(from)
}

// Fetch writes the binary at from to p.New (0700, fsynced) and checks it
// against the SHA256SUMS and SHA256SUMS.sig beside it. It returns the file's
// name and sha256. On error p.New does not exist.
func (f Fetcher) Fetch(ctx context.Context, p Paths, from string, trusted []ed25519.PublicKey) (name, digest string, err error) {
	if len(trusted) == 0 {
		return "", "", fmt.Errorf("%w: this device trusts no fleet key (design.trusted_keys)", ErrUnsigned)
	}
	name = baseName(from)
	sums, err := f.small(ctx, from, release.SumsFile)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s beside %s: %v", ErrUnsigned, release.SumsFile, from, err)
	}
	sig, err := f.small(ctx, from, release.SigFile)
	if err != nil {
		return "", "", fmt.Errorf("%w: %s beside %s: %v", ErrUnsigned, release.SigFile, from, err)
	}
	if err := design.Verify(trusted, sums, string(sig)); err != nil {
		return "", "", fmt.Errorf("%w: %s: %v", ErrUnsigned, release.SumsFile, err)
	}
	list, err := release.ParseSums(sums)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrUnsigned, err)
	}
	want := ""
	for _, s := range list {
		if s.Name == name {
			want = s.SHA256
		}
	}
	if want == "" {
		return "", "", fmt.Errorf("%w: %s does not list %s", ErrUnsigned, release.SumsFile, name)
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return "", "", err
	}
	r, err := f.open(ctx, from, "", MaxBinary)
	if err != nil {
		return "", "", fmt.Errorf("update: %w", err)
	}
	defer r.Close()
	tmp, err := os.CreateTemp(p.Dir, "."+filepath.Base(p.New)+".tmp-*")
	if err != nil {
		return "", "", err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(r, MaxBinary+1))
	if err != nil {
		return "", "", fmt.Errorf("update: read %s: %w", from, err)
	}
	if n > MaxBinary {
		return "", "", fmt.Errorf("update: %s is larger than %d bytes", from, MaxBinary)
	}
	digest = hex.EncodeToString(h.Sum(nil))
	if digest != want {
		return "", "", fmt.Errorf("%w: %s has sha256 %s, %s says %s", ErrUnsigned, name, digest, release.SumsFile, want)
	}
	if err = tmp.Chmod(0o700); err != nil {
		return "", "", err
	}
	if err = tmp.Sync(); err != nil {
		return "", "", fmt.Errorf("update: fsync: %w", err)
	}
	if err = tmp.Close(); err != nil {
		return "", "", err
	}
	if err = os.Rename(tmp.Name(), p.New); err != nil {
		return "", "", err
	}
	if err = atomicfile.SyncDir(p.Dir); err != nil {
		return "", "", err
	}
	return name, digest, nil
}

// CheckPlatform reads the Go build info of the binary at path, without
// running it, and checks it names goos/goarch (and goarm on 32-bit ARM).
func CheckPlatform(path, goos, goarch, goarm string) error {
	got, err := buildSettings(path)
	if err != nil {
		return fmt.Errorf("%w: %s is not a Go binary with build info: %v", ErrPlatform, filepath.Base(path), err)
	}
	if got["GOOS"] != goos || got["GOARCH"] != goarch {
		return fmt.Errorf("%w: it is built for %s/%s, this device is %s/%s", ErrPlatform, got["GOOS"], got["GOARCH"], goos, goarch)
	}
	if goarch == "arm" {
		g, _, _ := strings.Cut(got["GOARM"], ",")
		w, _, _ := strings.Cut(goarm, ",")
		if g > w { // armv7 code does not run on an armv6 board
			return fmt.Errorf("%w: it is built for armv%s, this build is armv%s", ErrPlatform, g, w)
		}
	}
	return nil
}

// Probe runs `path version --json` and returns what the binary says.
func Probe(ctx context.Context, path string) (Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "version", "--json")
	cmd.Stdout, cmd.Stderr = &limited{b: &out, n: maxSmall}, &limited{b: &errb, n: 4096}
	if err := cmd.Run(); err != nil {
		return Info{}, fmt.Errorf("update: the candidate does not run here (%s version --json: %v): %s", filepath.Base(path), err, strings.TrimSpace(errb.String()))
	}
	var in Info
	if err := json.Unmarshal(out.Bytes(), &in); err != nil || in.Version == "" {
		return Info{}, fmt.Errorf("%w: the candidate's version --json is not understood (%v): it predates self-update", ErrIncompatible, err)
	}
	return in, nil
}

type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		if len(p) < room {
			room = len(p)
		}
		l.b.Write(p[:room])
	}
	return len(p), nil
}

// Compatible checks that the swap and a rollback lose nothing: cand loads
// every snapshot self wrote, and self loads every snapshot cand will write.
// And that cand says it is built for self's platform.
func Compatible(self, cand Info) error {
	if cand.GOOS != self.GOOS || cand.GOARCH != self.GOARCH {
		return fmt.Errorf("%w: it says it is built for %s/%s, this device is %s/%s", ErrPlatform, cand.GOOS, cand.GOARCH, self.GOOS, self.GOARCH)
	}
	switch {
	case cand.SnapshotSchema <= 0 || cand.SnapshotSchemaRead < cand.SnapshotSchema:
		return fmt.Errorf("%w: %s declares no valid snapshot schema (writes %d, reads up to %d)", ErrIncompatible, cand.Version, cand.SnapshotSchema, cand.SnapshotSchemaRead)
	case cand.SnapshotSchema > self.SnapshotSchemaRead:
		return fmt.Errorf("%w: %s writes snapshot schema %d, which %s (reads up to %d) could not load after a rollback; install first a version that reads schema %d and writes %d",
			ErrIncompatible, cand.Version, cand.SnapshotSchema, self.Version, self.SnapshotSchemaRead, cand.SnapshotSchema, self.SnapshotSchema)
	case self.SnapshotSchema > cand.SnapshotSchemaRead:
		return fmt.Errorf("%w: %s reads snapshot schema up to %d, this version wrote %d",
			ErrIncompatible, cand.Version, cand.SnapshotSchemaRead, self.SnapshotSchema)
	}
	return nil
}

// FileSHA256 is the hex sha256 of a file ("" when it does not exist).
func FileSHA256(path string) (string, error) {
	d, err := release.FileSHA256(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	return d, err
}
