package image

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// Under emulation (qemu's TCG on a shared machine) a boot takes minutes.
const bootLimit = 20 * time.Minute

// partition is one entry of the image's partition table.
type partition struct {
	Start int64 `json:"start"` // sectors
	Size  int64 `json:"size"`
}

func partitions(t *testing.T, img string) []partition {
	t.Helper()
	out, err := exec.Command("sfdisk", "--json", img).Output()
	if err != nil {
		t.Fatalf("sfdisk --json %s: %v", img, err)
	}
	var pt struct {
		PartitionTable struct {
			Partitions []partition `json:"partitions"`
		} `json:"partitiontable"`
	}
	if err := json.Unmarshal(out, &pt); err != nil {
		t.Fatal(err)
	}
	if len(pt.PartitionTable.Partitions) != 3 {
		t.Fatalf("the image has %d partitions, want 3 (boot, root, data):\n%s", len(pt.PartitionTable.Partitions), out)
	}
	return pt.PartitionTable.Partitions
}

// fat is the boot partition of img, as mtools names it.
func fat(img string, p partition) string {
	return img + "@@" + strconv.FormatInt(p.Start*512, 10)
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// vm is one power-on of the image under qemu-system-aarch64 -M virt.
type vm struct {
	cmd     *exec.Cmd
	started time.Time
	mu      sync.Mutex
	console strings.Builder
	done    chan struct{}
}

func (v *vm) text() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.console.String()
}

// waitConsole waits for s on the console and returns when it came.
func (v *vm) waitConsole(t *testing.T, s string, limit time.Duration) time.Duration {
	t.Helper()
	if !v.until(limit, func() bool { return strings.Contains(v.text(), s) }) {
		select {
		case <-v.done:
			t.Fatalf("qemu exited before %q on the console:\n%s", s, tail(v.text(), 60))
		default:
		}
		t.Fatalf("no %q on the console in %s:\n%s", s, limit, tail(v.text(), 60))
	}
	return time.Since(v.started)
}

// until polls cond until it holds (true), limit passes or qemu exits.
func (v *vm) until(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		select {
		case <-v.done:
			return cond()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// powerCut kills qemu: the guest's page cache and the disk's queue are lost.
func (v *vm) powerCut() {
	_ = v.cmd.Process.Signal(syscall.SIGKILL)
	<-v.done
}

func tail(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// boot powers the card on; its console goes to the test's buffer and to
// consoleLog.
func boot(t *testing.T, img, kernel, initrd, consoleLog string) *vm {
	t.Helper()
	args := []string{"-n", "19", "qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a72", "-smp", "2", "-m", "1024",
		"-nodefaults", "-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "root=LABEL=OSROOT ro rootwait console=ttyAMA0 panic=10",
		"-drive", "file=" + img + ",format=raw,if=none,id=hd,cache=writeback",
		"-device", "virtio-blk-pci,drive=hd",
		"-netdev", "user,id=n0", "-device", "virtio-net-pci,netdev=n0",
		"-device", "virtio-rng-pci"}
	v := &vm{cmd: exec.Command("nice", args...), done: make(chan struct{})}
	out, err := v.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.cmd.Stderr = v.cmd.Stdout
	logf, err := os.OpenFile(consoleLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(logf, "\n===== power on %s\n", time.Now().UTC().Format(time.RFC3339))
	v.started = time.Now()
	if err := v.cmd.Start(); err != nil {
		t.Fatalf("qemu-system-aarch64: %v", err)
	}
	go func() {
		defer close(v.done)
		defer logf.Close()
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			line := strings.TrimRight(sc.Text(), "\r")
			fmt.Fprintln(logf, line)
			v.mu.Lock()
			v.console.WriteString(line + "\n")
			v.mu.Unlock()
		}
		_ = v.cmd.Wait()
	}()
	t.Cleanup(v.powerCut)
	return v
}

func task(id string, calls ...map[string]any) []byte {
	b, _ := json.Marshal(map[string]any{"task_id": id, "type": "test", "input": map[string]any{"call": calls}})
	return b
}

func appendCall(id string) map[string]any {
	return map[string]any{"tool": "file_append", "args": map[string]string{"file": "cut.log", "line": "line " + id}}
}

func sleepCall(ms int) map[string]any {
	return map[string]any{"tool": "sleep_ms", "args": map[string]int{"ms": ms}}
}

// TestImageBoot boots the image that `make image` built under
// qemu-system-aarch64 -M virt (Debian's kernel and initramfs, taken from
// the image's boot partition), on a card larger than the image, with an
// openstarry.yaml on the boot partition that points the device at a
// Mosquitto hub on this machine's loopback (10.0.2.2 inside qemu's user
// network). The data partition grows; the daemon boots (`boot complete`
// on the console); a task sent through the hub comes back done. Then
// tasks that take a few seconds each are sent and qemu is killed once
// the first of them is done, in the middle of the others: a power cut of
// the whole board. Powered on again, every task the hub took comes back
// done, each executed once (one agent tick per task, its line appended
// once, read off the data partition). It prints the time from power-on to `boot complete` and the
// image's size. make image-test runs it (OPENSTARRY_IMAGE_TEST=1).
func TestImageBoot(t *testing.T) {
	if os.Getenv("OPENSTARRY_IMAGE_TEST") == "" {
		t.Skip("the image's boot test takes minutes: make image-test runs it (OPENSTARRY_IMAGE_TEST=1)")
	}
	for _, tool := range []string{"qemu-system-aarch64", "sfdisk", "mcopy", "mtype", "xz", "e2fsck", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: packaging/image/deps.sh installs it", tool)
		}
	}
	xzImg := os.Getenv("OPENSTARRY_IMAGE")
	if xzImg == "" {
		m, _ := filepath.Glob("../../dist/openstarry-*-arm64.img.xz")
		sort.Slice(m, func(i, j int) bool { return mtime(m[i]).After(mtime(m[j])) })
		if len(m) == 0 {
			t.Fatal("no dist/openstarry-*-arm64.img.xz: run make image first (make image-test does)")
		}
		xzImg = m[0]
	}
	xzInfo, err := os.Stat(xzImg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	consoleLog := os.Getenv("OPENSTARRY_IMAGE_CONSOLE")
	if consoleLog == "" {
		consoleLog = filepath.Join(dir, "console.log")
	}
	img := filepath.Join(dir, "card.img")
	run(t, "sh", "-c", "nice -n 19 xz -dc '"+xzImg+"' > '"+img+"'")
	rawInfo, _ := os.Stat(img)
	pt := partitions(t, img)
	dataBefore := pt[2].Size / 2048
	// The card: 512 MiB more than the image, for the data partition.
	if err := os.Truncate(img, rawInfo.Size()+512<<20); err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s: %d bytes compressed, %d bytes raw; data partition %d MiB", filepath.Base(xzImg), xzInfo.Size(), rawInfo.Size(), dataBefore)

	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	const device = "image-test"
	cfg := filepath.Join(dir, "openstarry.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("data: /var/lib/openstarry\nmqtt:\n  broker: tcp://10.0.2.2:%d\n  device: %s\n", m.Port, device)), 0o600); err != nil {
		t.Fatal(err)
	}
	boot0 := fat(img, pt[0])
	run(t, "mcopy", "-o", "-i", boot0, cfg, "::openstarry.yaml")
	// The kernel and initramfs a Raspberry Pi's firmware would start, as
	// config.txt names them.
	var kname, iname string
	for _, l := range strings.Split(run(t, "mtype", "-i", boot0, "::config.txt"), "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, "kernel="); ok {
			kname = v
		}
		if v, ok := strings.CutPrefix(l, "initramfs "); ok {
			iname = v
		}
	}
	if kname == "" || iname == "" {
		t.Fatalf("config.txt on the boot partition names no kernel= or initramfs")
	}
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initrd.img")
	run(t, "mcopy", "-n", "-i", boot0, "::"+kname, kernel)
	run(t, "mcopy", "-n", "-i", boot0, "::"+iname, initrd)

	results := "openstarry/" + device + "/agents/master/results"
	tasks := "openstarry/" + device + "/agents/master/tasks"
	col := mqtttest.Collect(t, m.URL(), "image-test-observer", false, results)
	pub := paho.NewClient(paho.NewClientOptions().AddBroker(m.URL()).SetClientID("image-test-hub").SetCleanSession(true).
		SetProtocolVersion(4).SetAutoReconnect(true))
	if tok := pub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("hub publisher: %v", tok.Error())
	}
	defer pub.Disconnect(50)
	byTask := func() map[string][]mqtttest.Result { return mqtttest.Results(t, col, results) }
	waitDone := func(v *vm, ids ...string) {
		t.Helper()
		ok := v.until(bootLimit, func() bool {
			rs := byTask()
			for _, id := range ids {
				if len(rs[id]) == 0 {
					return false
				}
			}
			return true
		})
		if !ok {
			t.Fatalf("no result for every one of %v: %v\n%s", ids, byTask(), tail(v.text(), 60))
		}
	}

	// Power on.
	v := boot(t, img, kernel, initrd, consoleLog)
	first := v.waitConsole(t, "boot complete", bootLimit)
	t.Logf("first boot: power-on to boot complete %s", first.Round(time.Second))
	console := v.text()
	for _, want := range []string{"openstarry-growdata: growing", "applied openstarry.yaml from the boot partition", "host name openstarry-"} {
		if !strings.Contains(console, want) {
			t.Errorf("the first boot did not print %q", want)
		}
	}
	mqtttest.Publish(t, pub, tasks, task("hello", appendCall("hello")))
	waitDone(v, "hello")

	// The power cut: five tasks of 4 s each; qemu dies once the first is
	// done.
	var ids []string
	for i := range 5 {
		id := fmt.Sprintf("cut-%d", i)
		ids = append(ids, id)
		mqtttest.Publish(t, pub, tasks, task(id, sleepCall(4000), appendCall(id)))
	}
	waitDone(v, ids[0])
	v.powerCut()
	rs := byTask()
	var before []string
	for _, id := range ids {
		if len(rs[id]) > 0 {
			before = append(before, id)
		}
	}
	t.Logf("power cut with %d of %d tasks done: %v", len(before), len(ids), before)

	v = boot(t, img, kernel, initrd, consoleLog)
	second := v.waitConsole(t, "boot complete", bootLimit)
	t.Logf("second boot (after the power cut): power-on to boot complete %s", second.Round(time.Second))
	if !strings.Contains(v.text(), "openstarry.yaml unchanged since it was applied") {
		t.Errorf("the second boot applied the configuration again")
	}
	waitDone(v, ids...)
	rs = byTask()
	for _, id := range append([]string{"hello"}, ids...) {
		execs := map[uint64]bool{}
		for _, r := range rs[id] {
			if r.Status != "done" {
				t.Errorf("task %s: status %s (%s)", id, r.Status, r.Error)
			}
			execs[r.TickIndex] = true
		}
		if len(execs) != 1 {
			t.Errorf("task %s ran %d times: %+v", id, len(execs), rs[id])
		}
	}
	// The side effects, read off the card after a last power cut: each
	// task's line once (file_append syncs before its result is sent).
	// The partition is copied out and its journal replayed (e2fsck, as a
	// mount would) before debugfs reads it.
	v.powerCut()
	grown := partitions(t, img)[2]
	part := filepath.Join(dir, "data.fs")
	run(t, "dd", "if="+img, "of="+part, "bs=512", "skip="+strconv.FormatInt(grown.Start, 10), "count="+strconv.FormatInt(grown.Size, 10), "conv=sparse", "status=none")
	if out, err := exec.Command("e2fsck", "-fy", part).CombinedOutput(); err != nil {
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() > 1 {
			t.Fatalf("e2fsck of the data partition after the power cut: %v\n%s", err, out)
		}
	}
	out := run(t, "debugfs", "-R", "cat /agents/master/artifacts/cut.log", part)
	for _, id := range append([]string{"hello"}, ids...) {
		if n := strings.Count(out, "line "+id+"\n"); n != 1 {
			t.Errorf("cut.log has the line of %s %d times:\n%s", id, n, out)
		}
	}
	// The data partition grew to the end of the card.
	if grown.Size/2048 <= dataBefore {
		t.Errorf("the data partition is %d MiB, was %d MiB before the first boot", grown.Size/2048, dataBefore)
	}
	fmt.Printf("image-test: %s: %.1f MiB compressed, %.1f MiB raw; power-on to boot complete %s (first boot), %s (after the power cut); power cut with %d of %d tasks done, all %d done once after it\n",
		filepath.Base(xzImg), float64(xzInfo.Size())/(1<<20), float64(rawInfo.Size())/(1<<20), first.Round(time.Second), second.Round(time.Second), len(before), len(ids), len(ids))
}

func mtime(p string) time.Time {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}
	}
	return fi.ModTime()
}
