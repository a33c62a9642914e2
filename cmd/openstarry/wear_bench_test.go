//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// BenchmarkBlockBytes measures what one task costs the disk, through the
// real binary: the bytes each process hands to the block layer
// (write_bytes of /proc/PID/io: every page of the page cache the process
// dirties counts its 4 KiB once, when it goes from clean to dirty; journal
// blocks of the file system are not counted), divided by the number of
// tasks. Tasks are sequential (one client, each task sent once the last
// one's result is in): the worst case, since concurrent tasks share saves,
// on an agent that already ran a thousand tasks.
//
//	daemon/http   POST /agents/master/tasks?wait=10s on the daemon's listener
//	daemon/mqtt   a QoS 1 publish to the master's tasks topic on the embedded
//	              broker, counted when its result arrives (QoS 1)
//	run/mqtt      the same against `openstarry run`, whose process holds the
//	              agent and the embedded broker
//
// Metrics: agent_block_bytes/task (the agent process; in run/mqtt with the
// broker), daemon_block_bytes/task (the daemon process, embedded broker
// included), block_bytes/task (their sum). Target: block_bytes/task ≤ 16 KiB
// (16384) for every path with the default store (bbolt) and the default
// embedded broker. The data directory is under /var/tmp, which must be a
// disk file system (tmpfs pages never reach a block device, so they would
// count nothing: the benchmark refuses one).
func BenchmarkBlockBytes(b *testing.B) {
	for _, bc := range []struct {
		name   string
		daemon bool
		mqtt   bool
	}{
		{"daemon/http", true, false},
		{"daemon/mqtt", true, true},
		{"run/mqtt", false, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := startWearProc(b, bc.daemon)
			send := p.httpSender(b)
			// The agent's file grows to a working size first: a task
			// index of a thousand tasks (the cost of a commit grows with
			// the depth of its trees).
			post := p.httpPost(b)
			errs := make(chan error, 8)
			for c := range 8 {
				go func() {
					for i := c; i < 1000; i += 8 {
						if err := post(fmt.Sprintf("warm-%d", i)); err != nil {
							errs <- err
							return
						}
					}
					errs <- nil
				}()
			}
			for range 8 {
				if err := <-errs; err != nil {
					b.Fatalf("%v\n%s", err, p.logs())
				}
			}
			if bc.mqtt {
				send = p.mqttSender(b)
				send("warm-mqtt")
			}
			agent0, daemon0 := p.writeBytes(b)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				send(fmt.Sprintf("t%d", i))
			}
			b.StopTimer()
			agent1, daemon1 := p.writeBytes(b)
			a := float64(agent1-agent0) / float64(b.N)
			d := float64(daemon1-daemon0) / float64(b.N)
			b.ReportMetric(a, "agent_block_bytes/task")
			if bc.daemon {
				b.ReportMetric(d, "daemon_block_bytes/task")
			}
			b.ReportMetric(a+d, "block_bytes/task")
		})
	}
}

// wearProc is a daemon (with its master agent) or a lone `openstarry run`,
// with the embedded broker, on a data directory on disk.
type wearProc struct {
	*child
	agentPID   int // the agent's process (the child's own in run mode)
	daemonPID  int // 0 in run mode
	httpURL    string
	brokerURL  string
	agentTasks string
	results    string
}

var (
	// The daemon's listener in daemon mode (its line says "daemon
	// listening on http://…"; the master's own listener, which takes only
	// the daemon's token, is logged as "listening on http://…" after it),
	// the agent's in run mode.
	wearDaemonHTTPRe = regexp.MustCompile(`"message":"daemon listening on (?:http://)?([0-9.]+:[0-9]+)"`)
	wearRunHTTPRe    = regexp.MustCompile(`"message":"listening on http://([0-9.]+:[0-9]+)"`)
	wearMasterRe     = regexp.MustCompile(`"agent":"master","pid":(\d+)`)
)

// diskDir makes a short directory under /var/tmp and checks that it is on
// a disk file system.
func diskDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "osw")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		tb.Fatal(err)
	}
	const tmpfsMagic = 0x01021994
	if fs.Type == tmpfsMagic {
		tb.Fatalf("%s is on tmpfs: block-level writes cannot be measured there", dir)
	}
	return dir
}

func startWearProc(tb testing.TB, daemon bool) *wearProc {
	tb.Helper()
	data := diskDir(tb)
	p := &wearProc{agentTasks: "openstarry/wear/agents/master/tasks", results: "openstarry/wear/agents/master/results"}
	var cmd *exec.Cmd
	if daemon {
		cfg := filepath.Join(data, "openstarry.yaml")
		body := fmt.Sprintf("data: %s\nhttp:\n  listen: 127.0.0.1:0\nmqtt:\n  broker_listen: 127.0.0.1:0\n  device: wear\n", filepath.Join(data, "d"))
		if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
			tb.Fatal(err)
		}
		cmd = exec.Command(binPath, "start", "--config", cfg)
	} else {
		cmd = exec.Command(binPath, "run", "--agent", "master", "--device", "wear", "--listen", "127.0.0.1:0",
			"--broker-listen", "127.0.0.1:0", "--data", filepath.Join(data, "d"))
	}
	p.child = startChildCmd(tb, cmd)
	if daemon {
		p.waitLog("boot complete", 30*time.Second)
		p.daemonPID = cmd.Process.Pid
	} else {
		p.waitLog("subscribed to "+p.agentTasks, 30*time.Second)
		p.agentPID = cmd.Process.Pid
	}
	// The addresses and the master's pid are logged around the marker.
	wait.Until(tb, 10*time.Second, "the broker, HTTP address and master's pid in the log", func() error {
		logs := p.logs()
		if m := brokerLineRe.FindStringSubmatch(logs); m != nil {
			p.brokerURL = "tcp://" + m[1]
		}
		httpRe := wearRunHTTPRe
		if daemon {
			httpRe = wearDaemonHTTPRe
		}
		if m := httpRe.FindStringSubmatch(logs); m != nil {
			p.httpURL = "http://" + m[1]
		}
		if m := wearMasterRe.FindStringSubmatch(logs); m != nil && daemon {
			p.agentPID, _ = strconv.Atoi(m[1])
		}
		if p.brokerURL == "" || p.httpURL == "" || p.agentPID == 0 {
			return fmt.Errorf("not all logged yet:\n%s", logs)
		}
		return nil
	})
	return p
}

// writeBytes reads write_bytes of the agent and of the daemon (0 in run
// mode).
func (p *wearProc) writeBytes(tb testing.TB) (agent, daemon int64) {
	tb.Helper()
	agent = procWriteBytes(tb, p.agentPID)
	if p.daemonPID != 0 {
		daemon = procWriteBytes(tb, p.daemonPID)
	}
	return agent, daemon
}

// procWriteBytes is the write_bytes line of /proc/PID/io.
func procWriteBytes(tb testing.TB, pid int) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				tb.Fatal(err)
			}
			return n
		}
	}
	tb.Fatalf("no write_bytes in /proc/%d/io", pid)
	return 0
}

// httpSender sends a task with POST ?wait= and checks that the answer is
// its result.
func (p *wearProc) httpSender(tb testing.TB) func(id string) {
	post := p.httpPost(tb)
	return func(id string) {
		if err := post(id); err != nil {
			tb.Fatal(err)
		}
	}
}

// httpPost is httpSender's request, safe for concurrent use.
func (p *wearProc) httpPost(tb testing.TB) func(id string) error {
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	tb.Cleanup(c.CloseIdleConnections)
	url := p.httpURL + "/agents/master/tasks?wait=10s"
	return func(id string) error { return postWait(c, url, id) }
}

// mqttSender publishes a task at QoS 1 to the agent's tasks topic and waits
// for its result, received at QoS 1 by a subscriber with a clean session.
func (p *wearProc) mqttSender(tb testing.TB) func(id string) {
	results := make(chan string, 16)
	sub := paho.NewClient(paho.NewClientOptions().AddBroker(p.brokerURL).SetClientID("wear-results").
		SetCleanSession(true).SetProtocolVersion(4).
		SetDefaultPublishHandler(func(_ paho.Client, m paho.Message) {
			var r struct {
				TaskID string `json:"task_id"`
				Status string `json:"status"`
			}
			if json.Unmarshal(m.Payload(), &r) == nil && r.Status == "done" {
				results <- r.TaskID
			}
		}))
	if tok := sub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("subscriber: %v", tok.Error())
	}
	tb.Cleanup(func() { sub.Disconnect(50) })
	if tok := sub.Subscribe(p.results, 1, nil); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("subscribe: %v", tok.Error())
	}
	pub := paho.NewClient(paho.NewClientOptions().AddBroker(p.brokerURL).SetClientID("wear-tasks").
		SetCleanSession(true).SetProtocolVersion(4))
	if tok := pub.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		tb.Fatalf("publisher: %v", tok.Error())
	}
	tb.Cleanup(func() { pub.Disconnect(50) })
	return func(id string) {
		tok := pub.Publish(p.agentTasks, 1, false, mqttTask(id, "payload"))
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			tb.Fatalf("publish %s: %v", id, tok.Error())
		}
		deadline := time.After(20 * time.Second)
		for {
			select {
			case got := <-results:
				if got == id {
					return
				}
			case <-deadline:
				tb.Fatalf("no result for %s in 20s:\n%s", id, p.logs())
			}
		}
	}
}
