//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"

	"github.com/openstarry/openstarry-edge/internal/slowdisk"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// The end-to-end benchmarks run the real binary: `openstarry start` as a
// child process on a fresh data directory (bbolt, the shipped master with
// the echo brain), and clients in this process that speak to it as a user
// would, over loopback. Each task is counted once its result is back in the
// client: the answer of POST ?wait over HTTP, the result message over MQTT.
//
//	sequential  one client, one task at a time, and before each task, in the
//	            same loop, one raw 4 KiB write + fdatasync on the file
//	            system of the data directory (storagetest.RawSyncer):
//	              median-ms/task, p99-ms/task  per-task latency
//	              raw-ms                       median raw sync
//	              x_raw, p99_x_raw             median and p99 over raw-ms
//	                                           (target: median ≤ 6)
//	clients=N   N clients, each sending its next task once the last one's
//	            result is in: tasks/s, and x_1client, the rate over that of
//	            one client in the same run (targets: 8 ≥ 4, 64 ≥ 8); over
//	            HTTP each client has its own keep-alive connection, over MQTT
//	            they share one connection, as the tasks of one hub do;
//	            cpu-ms/task, the processor time of the daemon (with its
//	            embedded broker), the master and this process (the clients)
//	            per task, and cpu_bound_tasks/s, the rate at which that
//	            time fills every processor of the machine: the ceiling of
//	            clients=N on this machine, whatever the disk
//
// Run: go test -run '^$' -bench EndToEnd -benchtime 300x ./cmd/openstarry/

// BenchmarkEndToEndHTTP sends tasks to the daemon's listener, which proxies
// them to the master: POST /agents/master/tasks?wait=10s.
func BenchmarkEndToEndHTTP(b *testing.B) { httpCases(b, dataDir(b)) }

// sdSync is what BenchmarkEndToEndSlowDisk adds to every sync: an SD card
// or eMMC chip syncs a small write in one to ten milliseconds.
const sdSync = 2 * time.Millisecond

// BenchmarkEndToEndSlowDisk is BenchmarkEndToEndHTTP with the data
// directory on a disk whose syncs take sdSync longer (internal/slowdisk, a
// FUSE filesystem: it needs root). There the sync, not the processor, is
// what a task waits for, as on a board's SD card, and x_1client shows what
// group commit buys.
func BenchmarkEndToEndSlowDisk(b *testing.B) {
	data := filepath.Join(slowdisk.New(b, sdSync), "data")
	if err := os.Mkdir(data, 0o700); err != nil {
		b.Fatal(err)
	}
	httpCases(b, data)
}

// httpCases runs e2eCases over HTTP against a daemon on the data directory
// data.
func httpCases(b *testing.B, data string) {
	c := startDaemon(b, daemonConfig(b, data, ""))
	url := c.url() + "/agents/master/tasks?wait=10s"
	cpu := applianceCPU(b, c)
	var clients []*http.Client
	send := func(client int, id string) error { return postWait(clients[client], url, id) }
	// One keep-alive connection per client, as a client library keeps.
	for range 64 {
		clients = append(clients, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}, Timeout: 30 * time.Second})
	}
	b.Cleanup(func() {
		for _, cl := range clients {
			cl.CloseIdleConnections()
		}
	})
	e2eCases(b, data, cpu, send)
}

// BenchmarkEndToEndMQTT publishes tasks (QoS 1) to the master's task topic
// and counts each once its result is published back (QoS 1), through the
// daemon's embedded broker and through a Mosquitto it is configured to use.
func BenchmarkEndToEndMQTT(b *testing.B) {
	b.Run("embedded", func(b *testing.B) {
		data := dataDir(b)
		c := startDaemon(b, daemonConfig(b, data, "mqtt:\n  broker_listen: 127.0.0.1:0\n  device: bench\n"))
		m := regexp.MustCompile(`embedded broker listening on (127\.0\.0\.1:\d+)`).FindStringSubmatch(c.logs())
		if m == nil {
			b.Fatalf("no embedded broker:\n%s", c.logs())
		}
		url := "tcp://" + m[1]
		c.waitLog("mqtt: connected to "+url, 20*time.Second)
		e2eCases(b, data, applianceCPU(b, c), mqttSender(b, url))
	})
	b.Run("mosquitto", func(b *testing.B) {
		// set_tcp_nodelay: with Mosquitto's default (Nagle's algorithm on
		// its sockets) a small message waits for the peer's delayed ACK,
		// and a task took 47 ms instead of 7; docs/figures.md says so to
		// operators. autosave_on_changes false: the hub saves its
		// persistence file once a second (autosave_interval 1), as
		// packaging/mosquitto/hub.conf ships it; mqtttest's default, a save
		// after every change, rewrote Mosquitto's whole database after each
		// message, which was 0.4–0.5 ms of its processor time per task and
		// held every case to about 250 tasks/s, whatever the device did.
		mq := mqtttest.StartMosquitto(b, mqtttest.Options{Extra: []string{"set_tcp_nodelay true", "autosave_on_changes false"}})
		data := dataDir(b)
		c := startDaemon(b, daemonConfig(b, data, "mqtt:\n  broker: "+mq.URL()+"\n  device: bench\n"))
		c.waitLog("mqtt: connected to "+mq.URL(), 20*time.Second)
		cpu := applianceCPU(b, c)
		e2eCases(b, data, func() time.Duration { return cpu() + cpuTime(mq.PID()) }, mqttSender(b, mq.URL()))
	})
}

// mqttSender connects one client to the broker at url, subscribed to the
// master's results, and returns a send function that publishes a task and
// returns once its result has arrived.
func mqttSender(b *testing.B, url string) func(int, string) error {
	const prefix = "openstarry/bench/agents/master/"
	var mu sync.Mutex
	waiting := map[string]chan string{}
	o := paho.NewClientOptions().AddBroker(url).SetClientID(fmt.Sprintf("e2e-%d", time.Now().UnixNano())).
		SetCleanSession(true).SetMaxResumePubInFlight(128)
	cl := paho.NewClient(o)
	if tok := cl.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("connect %s: %v", url, tok.Error())
	}
	b.Cleanup(func() { cl.Disconnect(50) })
	if tok := cl.Subscribe(prefix+"results", 1, func(_ paho.Client, m paho.Message) {
		var r struct {
			TaskID string `json:"task_id"`
			Status string `json:"status"`
		}
		if json.Unmarshal(m.Payload(), &r) != nil {
			return
		}
		mu.Lock()
		ch := waiting[r.TaskID]
		delete(waiting, r.TaskID)
		mu.Unlock()
		if ch != nil {
			ch <- r.Status
		}
	}); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		b.Fatalf("subscribe: %v", tok.Error())
	}
	return func(_ int, id string) error {
		ch := make(chan string, 1)
		mu.Lock()
		waiting[id] = ch
		mu.Unlock()
		tok := cl.Publish(prefix+"tasks", 1, false, `{"task_id":"`+id+`","input":"payload"}`)
		if !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
			return fmt.Errorf("publish %s: %v", id, tok.Error())
		}
		select {
		case st := <-ch:
			if st != "done" {
				return fmt.Errorf("task %s: %s", id, st)
			}
			return nil
		case <-time.After(30 * time.Second):
			return fmt.Errorf("task %s: no result within 30s", id)
		}
	}
}

var e2eRun atomic.Int64

// applianceCPU returns a function that reads the processor time the daemon
// c, its master and this process have run so far.
func applianceCPU(b *testing.B, c *child) func() time.Duration {
	m := masterPIDRe.FindStringSubmatch(c.logs())
	if m == nil {
		b.Fatalf("no master pid in the daemon's log:\n%s", c.logs())
	}
	master, _ := strconv.Atoi(m[1])
	daemon, self := c.cmd.Process.Pid, os.Getpid()
	return func() time.Duration { return cpuTime(daemon) + cpuTime(master) + cpuTime(self) }
}

// e2eCases runs the sequential case and the clients=1, 8, 64 cases with
// send, which sends task id as client number client (0..63) and returns
// once its result is in; cpu reads the processor time of every process
// involved.
func e2eCases(b *testing.B, data string, cpu func() time.Duration, send func(client int, id string) error) {
	run := e2eRun.Add(1)
	// Warm up: every client's connection open, the agent's store grown.
	for i := range 64 {
		if err := send(i, fmt.Sprintf("warm%d-%d", run, i)); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("sequential", func(b *testing.B) {
		raw := storagetest.NewRawSyncer(b, data)
		lat := make([]time.Duration, b.N)
		raws := make([]time.Duration, b.N)
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			raw.Sync(b)
			raws[i] = time.Since(t0)
			t0 = time.Now()
			if err := send(0, fmt.Sprintf("seq%d-%d-%d", run, b.N, i)); err != nil {
				b.Fatal(err)
			}
			lat[i] = time.Since(t0)
		}
		b.StopTimer()
		slices.Sort(lat)
		slices.Sort(raws)
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		p50, p99, r50 := lat[len(lat)/2], lat[min(len(lat)-1, len(lat)*99/100)], raws[len(raws)/2]
		b.ReportMetric(ms(p50), "median-ms/task")
		b.ReportMetric(ms(p99), "p99-ms/task")
		b.ReportMetric(ms(r50), "raw-ms")
		b.ReportMetric(float64(p50)/float64(r50), "x_raw")
		b.ReportMetric(float64(p99)/float64(r50), "p99_x_raw")
		b.ReportMetric(0, "ns/op") // the loop times raw syncs too
	})
	var one float64
	for _, clients := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			n := max(b.N, 10*clients) // every client sends several
			b.ResetTimer()
			cpu0 := cpu()
			el := runClients(b, clients, n, func(c int, i int64) error {
				return send(c, fmt.Sprintf("c%d-%d-%d-%d", run, clients, b.N, i))
			})
			perTask := (cpu() - cpu0) / time.Duration(n)
			rate := float64(n) / el.Seconds()
			b.ReportMetric(rate, "tasks/s")
			b.ReportMetric(float64(perTask)/1e6, "cpu-ms/task")
			b.ReportMetric(float64(runtime.NumCPU())/perTask.Seconds(), "cpu_bound_tasks/s")
			if clients == 1 {
				one = rate
			} else if one > 0 {
				b.ReportMetric(rate/one, "x_1client")
			}
		})
	}
}
