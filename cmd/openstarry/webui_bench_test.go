//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// qemuARMRegister is the binfmt_misc entry that runs 32-bit ARM ELF files
// with qemu-arm-static (the kernel decodes the \x escapes itself).
const qemuARMRegister = `:qemu-arm:M::\x7fELF\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x28\x00:` +
	`\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff:/usr/bin/qemu-arm-static:F`

// BenchmarkWebUIFirstPaint opens the web UI in a headless Chromium with its
// cache off, as a first visit, and reports the time from navigation to the
// first contentful paint (ms/first-paint) and until the agents' table is
// filled from /status (ms/agents-listed).
//
// OPENSTARRY_BENCH_ARM=7 runs the daemon and its agents as the linux/armv7
// binary under qemu-arm-static (registered with binfmt_misc in a user and
// mount namespace of the benchmark's own, so the host is untouched): the
// figure of a small board, pessimistic since every instruction is
// emulated.
func BenchmarkWebUIFirstPaint(b *testing.B) {
	bin := binPath
	var wrap []string
	if os.Getenv("OPENSTARRY_BENCH_ARM") == "7" {
		if _, err := os.Stat("/usr/bin/qemu-arm-static"); err != nil {
			b.Fatal("no /usr/bin/qemu-arm-static (apt-get install qemu-user-static)")
		}
		bin = filepath.Join(b.TempDir(), "openstarry-armv7")
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm", "GOARM=7")
		if out, err := build.CombinedOutput(); err != nil {
			b.Fatalf("building for armv7: %v\n%s", err, out)
		}
		wrap = []string{"unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
			`mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc && printf '%s' "$REG" > /proc/sys/fs/binfmt_misc/register && exec "$@"`, "sh"}
	}
	data := dataDir(b)
	cfg := daemonConfig(b, data, "supervise:\n  backoff_initial: 1s\n  stop_timeout: 10s\n  ready_timeout: 5m\n")
	argv := append(append(wrap, bin), "start", "--config", cfg)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "OPENSTARRY_LOG_FORMAT=json", "REG="+qemuARMRegister)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group: the namespace's shell, daemon and agents
		_ = cmd.Wait()
	})
	base, booted := make(chan string, 1), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if m := listenRe.FindStringSubmatch(line); m != nil {
				select {
				case base <- m[1]:
				default:
				}
			}
			if strings.Contains(line, "boot complete") {
				close(booted)
			}
		}
	}()
	t0 := time.Now()
	select {
	case <-booted:
	case <-time.After(5 * time.Minute):
		b.Fatal("the daemon did not boot within 5 minutes")
	}
	b.Logf("daemon booted in %s", time.Since(t0).Round(time.Millisecond))
	url := <-base

	br := newBrowser(b, 1100, 800)
	br.run("cache off", 10*time.Second, chromedp.ActionFunc(func(ctx context.Context) error {
		return network.SetCacheDisabled(true).Do(ctx)
	}))
	var paint, listed float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		br.run("navigate", 2*time.Minute, chromedp.Navigate(fmt.Sprintf("%s/?visit=%d#/agents", url, i)))
		br.waitText("agents listed", "#agents-table", "running", 2*time.Minute)
		var fcp, now float64
		br.run("timings", 10*time.Second,
			chromedp.Evaluate(`performance.now()`, &now),
			chromedp.Evaluate(`(performance.getEntriesByName('first-contentful-paint')[0] || {startTime: -1}).startTime`, &fcp))
		if fcp < 0 {
			b.Fatal("no first-contentful-paint entry")
		}
		paint += fcp
		listed += now
	}
	b.StopTimer()
	b.ReportMetric(paint/float64(b.N), "ms/first-paint")
	b.ReportMetric(listed/float64(b.N), "ms/agents-listed")
}
