package packaging

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/portguard"
	"github.com/openstarry/openstarry-edge/internal/wait"
)

// The release these tests check is built once, by build.sh itself, into a
// temporary directory. make test builds a short one: the standard
// linux/amd64 binary and its .deb, and the small (bbolt-only) builds for
// arm64, armv7 and windows/amd64, which share everything but the stores
// with the standard ones and cost a fraction of their cold cross-build.
// OPENSTARRY_RELEASE_FULL=1 (make release-test) builds and checks the whole
// release: every target, every small build and the four .debs.
var rel struct {
	once sync.Once
	dir  string // DIST
	key  string // PREFIX of the signing key pair
	out  string // what build.sh printed
	err  error
}

func full() bool { return os.Getenv("OPENSTARRY_RELEASE_FULL") == "1" }

func TestMain(m *testing.M) {
	code := portguard.Run(m) // the release's binaries run here: none may dial 127.0.0.1:1883 or :7777
	if rel.dir != "" {
		os.RemoveAll(filepath.Dir(rel.dir))
	}
	os.Exit(code)
}

// release builds the release once and returns its directory.
func release(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("the release is built and checked on linux/amd64")
	}
	rel.once.Do(func() {
		root, err := os.MkdirTemp("", "openstarry-release-")
		if err != nil {
			rel.err = err
			return
		}
		rel.dir = filepath.Join(root, "dist")
		rel.key = filepath.Join(root, "fleet")
		// The signing key, made by the same command an operator uses.
		kg := exec.Command("go", "run", "../cmd/openstarry", "templates", "keygen", "--out", rel.key)
		kg.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := kg.CombinedOutput(); err != nil {
			rel.err = fmt.Errorf("templates keygen: %v\n%s", err, out)
			return
		}
		env := []string{"DIST=" + rel.dir, "RELEASE_KEY=" + rel.key + ".key", "VERSION=v1.2.3", "COMMIT=abc1234"}
		if !full() {
			env = append(env, "TARGETS=linux/amd64", "SMALL_TARGETS=linux/arm64 linux/arm/7 windows/amd64", "DEB_ARCHS=amd64")
		} else {
			env = append(env, "SMALL_TARGETS=linux/arm64 linux/arm/7 linux/arm/6 windows/amd64")
		}
		cmd := exec.Command("./build.sh", "release")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		rel.out = string(out)
		if err != nil {
			rel.err = fmt.Errorf("build.sh release: %v\n%s", err, out)
		}
	})
	if rel.err != nil {
		t.Fatal(rel.err)
	}
	return rel.dir
}

// host is the release's own linux/amd64 binary, run on this machine.
func host(t *testing.T) string { return filepath.Join(release(t), "openstarry-linux-amd64") }

func run(t *testing.T, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

// TestReleaseSigned: build.sh checked and printed every binary's size,
// SHA256SUMS lists every file and verifies with the fleet key, and a
// changed file or a foreign key is refused.
func TestReleaseSigned(t *testing.T) {
	dir := release(t)
	t.Logf("build.sh release:\n%s", rel.out)
	files, _ := filepath.Glob(filepath.Join(dir, "openstarry*"))
	var bins int
	for _, f := range files {
		name := filepath.Base(f)
		if strings.HasSuffix(name, ".deb") {
			continue
		}
		bins++
		// The budgets: 20 MiB, 12.5 MiB for the small (bbolt-only) Linux
		// builds, 13.5 for a small Windows build; each binary at least
		// 1 MiB under its budget.
		budget := "20"
		if strings.HasPrefix(name, "openstarry-small-") {
			budget = "12.5"
			if strings.HasSuffix(name, ".exe") {
				budget = "13.5"
			}
		}
		if !regexp.MustCompile(regexp.QuoteMeta(f) + ` +[0-9.]+ MiB  \S+  static  \(budget ` + regexp.QuoteMeta(budget) + ` MiB\)  headroom [1-9][0-9]*\.[0-9]+ MiB`).MatchString(rel.out) {
			t.Errorf("build.sh did not report %s as static and at least 1 MiB under its budget of %s MiB", name, budget)
		}
	}
	if want := 4; !full() && bins != want {
		t.Errorf("%d binaries, want %d", bins, want)
	}
	out, err := run(t, host(t), "verify-release", "--key", rel.key+".pub", dir)
	if err != nil || !strings.Contains(out, fmt.Sprintf("%d files verified", len(files))) {
		t.Fatalf("verify-release: %v\n%s", err, out)
	}
	sums, _ := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	for _, f := range files {
		if !strings.Contains(string(sums), "  "+filepath.Base(f)+"\n") {
			t.Errorf("SHA256SUMS does not list %s", filepath.Base(f))
		}
	}

	// A tampered copy and a foreign key are refused.
	bad := t.TempDir()
	for _, n := range []string{"SHA256SUMS", "SHA256SUMS.sig", "openstarry-linux-amd64"} {
		copyFile(t, filepath.Join(dir, n), filepath.Join(bad, n))
	}
	if out, err := run(t, host(t), "verify-release", "--key", rel.key+".pub", bad); err == nil || !strings.Contains(out, "checksum mismatch: missing") {
		t.Errorf("verify-release of a partial release: %v\n%s", err, out)
	}
	f, _ := os.OpenFile(filepath.Join(bad, "openstarry-linux-amd64"), os.O_WRONLY|os.O_APPEND, 0)
	f.Write([]byte("x"))
	f.Close()
	if out, err := run(t, host(t), "verify-release", "--key", rel.key+".pub", bad); err == nil || !strings.Contains(out, "openstarry-linux-amd64: checksum mismatch: sha256") {
		t.Errorf("verify-release of a changed binary: %v\n%s", err, out)
	}
	other := filepath.Join(t.TempDir(), "other")
	if out, err := run(t, host(t), "templates", "keygen", "--out", other); err != nil {
		t.Fatal(err, out)
	}
	if out, err := run(t, host(t), "verify-release", "--key", other+".pub", dir); err == nil || !strings.Contains(out, "which is not trusted") {
		t.Errorf("verify-release with a foreign key: %v\n%s", err, out)
	}
}

// TestCheckbin: the release check refuses a binary over its budget and one
// that is not static.
func TestCheckbin(t *testing.T) {
	dir := release(t)
	out, err := run(t, "go", "run", "./checkbin", "-max", "5", filepath.Join(dir, "openstarry-linux-amd64"))
	if err == nil || !strings.Contains(out, "exceeds the budget of 5.00 MiB") {
		t.Errorf("checkbin -max 5: %v\n%s", err, out)
	}
	dyn := filepath.Join(t.TempDir(), "dyn")
	src := filepath.Join(t.TempDir(), "main.go")
	os.WriteFile(src, []byte("package main\n\nimport \"os/user\"\n\nfunc main() { user.Current() }\n"), 0o644)
	build := exec.Command("go", "build", "-o", dyn, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Skipf("no C toolchain for a cgo binary: %v\n%s", err, out)
	}
	out, err = run(t, "go", "run", "./checkbin", dyn)
	if err == nil || !strings.Contains(out, "CGO_ENABLED") || !strings.Contains(out, "dynamically linked") {
		t.Errorf("checkbin of a cgo binary: %v\n%s", err, out)
	}
}

// emulated lists the binaries run under qemu-user-static.
func emulated(t *testing.T) []struct{ file, qemu, platform string } {
	dir := release(t)
	list := []struct{ file, qemu, platform string }{
		{"openstarry-small-linux-arm64", "qemu-aarch64-static", "platform: linux/arm64\n"},
		{"openstarry-small-linux-armv7", "qemu-arm-static", "platform: linux/arm (armv7)\n"},
	}
	if full() {
		list = append(list,
			struct{ file, qemu, platform string }{"openstarry-linux-arm64", "qemu-aarch64-static", "platform: linux/arm64\n"},
			struct{ file, qemu, platform string }{"openstarry-linux-armv7", "qemu-arm-static", "platform: linux/arm (armv7)\n"},
			struct{ file, qemu, platform string }{"openstarry-linux-armv6", "qemu-arm-static", "platform: linux/arm (armv6)\n"})
	}
	for i := range list {
		list[i].file = filepath.Join(dir, list[i].file)
		if _, err := exec.LookPath(list[i].qemu); err != nil {
			t.Fatalf("%s is not installed (apt-get install qemu-user-static)", list[i].qemu)
		}
	}
	return list
}

// TestQEMU: the ARM binaries run under emulation: version names the
// platform (and the ARM variant) and what is compiled in, a store left out
// is refused naming the build, and an agent answers a task over HTTP.
func TestQEMU(t *testing.T) {
	for _, b := range emulated(t) {
		t.Run(filepath.Base(b.file), func(t *testing.T) {
			out, err := run(t, b.qemu, b.file, "version")
			if err != nil || !strings.Contains(out, "openstarry v1.2.3\ncommit: abc1234\n") || !strings.Contains(out, b.platform) || !strings.Contains(out, "brains: echo") {
				t.Fatalf("version: %v\n%s", err, out)
			}
			small := strings.Contains(b.file, "-small-")
			if small {
				if !strings.Contains(out, "stores: bbolt\n") || !strings.Contains(out, "left out: file (nofile) redis (noredis) rediss (noredis) sqlite (nosqlite)") ||
					!strings.Contains(out, "session continuity: not compiled in (nosqlite)\n") {
					t.Errorf("small build's version:\n%s", out)
				}
				out, err := run(t, b.qemu, b.file, "run", "--agent", "a", "--data", t.TempDir(), "--store", "sqlite:///"+t.TempDir()+"/s.db", "--listen", "", "--no-mqtt")
				if err == nil || !strings.Contains(out, "the sqlite store is not compiled into this build (built with -tags nosqlite; built in: bbolt://)") {
					t.Errorf("a sqlite store in the small build: %v\n%s", err, out)
				}
			} else if !strings.Contains(out, "stores: bbolt file redis rediss sqlite\n") {
				t.Errorf("standard build's version:\n%s", out)
			}
			roundTrip(t, []string{b.qemu, b.file})
		})
	}
}

// roundTrip runs `openstarry run` (argv is the command and its leading
// arguments) with the embedded broker and sends it a task over HTTP.
func roundTrip(t *testing.T, argv []string, data ...string) {
	t.Helper()
	d := t.TempDir()
	if len(data) > 0 {
		d = data[0]
	}
	args := append(argv[1:], "run", "--agent", "qa", "--data", d, "--listen", "127.0.0.1:0", "--broker-listen", "127.0.0.1:0", "--log-format", "json")
	c := start(t, argv[0], args...)
	base := c.waitFor(t, regexp.MustCompile(`listening on (http://[0-9.:]+)`), 3*time.Minute)
	body := `{"task_id": "t-1", "type": "echo", "input": "hello from the board"}`
	resp, err := http.Post(base+"/agents/qa/tasks", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST task: %v\n%s", err, c.logs())
	}
	resp.Body.Close()
	var res struct {
		TaskID, Status string
		Output         any
	}
	if wait.Poll(2*time.Minute, func() error {
		var r *http.Response
		if r, err = http.Get(base + "/agents/qa/tasks/t-1"); err == nil {
			data, _ := io.ReadAll(r.Body)
			r.Body.Close()
			json.Unmarshal(data, &res)
		}
		if res.Status == "done" && res.Output == "hello from the board" {
			return nil
		}
		return errors.New(res.Status)
	}) != nil {
		t.Fatalf("task result %+v (%v)\n%s", res, err, c.logs())
	}
}

// proc is a child process whose output is scanned for a pattern.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	buf  bytes.Buffer
	seen chan string
	re   *regexp.Regexp
}

func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(name, args...), seen: make(chan string, 1)}
	pr, pw := io.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = pw, pw
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.buf.WriteString(sc.Text() + "\n")
			re := p.re
			p.mu.Unlock()
			if re != nil {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					select {
					case p.seen <- m[len(m)-1]:
					default:
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
		pw.Close()
	})
	return p
}

func (p *proc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// waitFor waits for a line matching re (set before the line can arrive:
// lines already seen are searched too) and returns its last group.
func (p *proc) waitFor(t *testing.T, re *regexp.Regexp, d time.Duration) string {
	t.Helper()
	p.mu.Lock()
	p.re = re
	if m := re.FindStringSubmatch(p.buf.String()); m != nil {
		p.mu.Unlock()
		return m[len(m)-1]
	}
	p.mu.Unlock()
	select {
	case s := <-p.seen:
		return s
	case <-time.After(d):
		t.Fatalf("no line matching %s within %s:\n%s", re, d, p.logs())
	}
	return ""
}

// binfmt makes the kernel run ARM binaries through qemu, as the daemon
// execs its agents: it mounts binfmt_misc if needed and registers the
// interpreter from qemu-user-static's binfmt.d file (flags OCF: the
// interpreter is opened now, so it works in any mount namespace). The
// registration is left in place, as binfmt-support would leave it.
func binfmt(t *testing.T, name string) {
	t.Helper()
	const dir = "/proc/sys/fs/binfmt_misc"
	if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "register")); err != nil {
		if out, err := exec.Command("mount", "-t", "binfmt_misc", "binfmt_misc", dir).CombinedOutput(); err != nil {
			t.Skipf("binfmt_misc cannot be mounted here (%v: %s): the daemon cannot exec its ARM agents under emulation", err, out)
		}
	}
	conf, err := os.ReadFile("/usr/lib/binfmt.d/" + name + ".conf")
	if err != nil {
		t.Fatalf("qemu-user-static's binfmt entry: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "register"), os.O_WRONLY, 0)
	if err != nil {
		t.Skipf("binfmt_misc is not writable here: %v", err)
	}
	_, err = f.Write(bytes.TrimSpace(conf))
	f.Close()
	if _, serr := os.Stat(filepath.Join(dir, name)); serr != nil {
		t.Skipf("the kernel refused the binfmt_misc entry %s: %v", name, err)
	}
}

// TestQEMUDaemon: the arm64 daemon boots to "master online" under
// emulation, spawning its master agent as a child ARM process.
func TestQEMUDaemon(t *testing.T) {
	bin := filepath.Join(release(t), "openstarry-small-linux-arm64")
	binfmt(t, "qemu-aarch64")
	cfg := filepath.Join(t.TempDir(), "openstarry.yaml")
	os.WriteFile(cfg, []byte("http:\n  listen: 127.0.0.1:0\nmqtt:\n  broker_listen: 127.0.0.1:0\nsupervise:\n  ready_timeout: 3m\n"), 0o600)
	c := start(t, bin, "start", "--config", cfg, "--data", t.TempDir(), "--log-format", "json")
	c.waitFor(t, regexp.MustCompile(`phase 3/4 (master online)`), 4*time.Minute)
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}
