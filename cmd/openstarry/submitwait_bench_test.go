package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/design"
	"github.com/openstarry/openstarry-edge/core/host"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/transport/httpapi"
)

// BenchmarkInProcessSubmitWait measures the throughput of concurrent
// submit-and-wait clients: each client sends a task with POST
// /agents/{id}/tasks?wait=10s and, once the answer (the task's result) is
// in, sends the next. The agent (echo brain, real bbolt store in the
// benchmark's temporary directory) and the HTTP API run in this process; the
// clients speak HTTP to it over loopback. Metrics:
//
//	tasks/s     finished tasks per second, all clients together
//	x_1client   tasks/s over that of one client (the clients=1 case of the
//	            same run): what group commit buys
//	saves/task  snapshot saves per finished task
//
// Targets: 8 clients ≥ 4× one, 64 clients ≥ 8× one.
func BenchmarkInProcessSubmitWait(b *testing.B) {
	var oneClient float64
	for _, clients := range []int{1, 8, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			rate := submitWait(b, clients)
			if clients == 1 {
				oneClient = rate
			} else if oneClient > 0 {
				b.ReportMetric(rate/oneClient, "x_1client")
			}
		})
	}
}

// submitWait runs b.N tasks through clients concurrent submit-and-wait
// clients and returns their throughput in tasks per second.
func submitWait(b *testing.B, clients int) float64 {
	dir := b.TempDir()
	st, err := bbolt.Open(dir, bbolt.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	tmpl, err := design.Decode(mustShipped(b, "echo"))
	if err != nil {
		b.Fatal(err)
	}
	tmpl.Limits.MaxQueue = 100000
	var saves atomic.Int64
	rt, err := host.Start(context.Background(), host.Agent{ID: "bench", Template: tmpl, Store: st, DataDir: dir,
		Log: zerolog.Nop(), AfterSave: func(*agent.Snapshot) { saves.Add(1) }})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Stop(context.Background())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: httpapi.New(httpapi.Options{Agents: httpapi.Single{R: rt},
		MaxTaskBytes: 1 << 16, Log: zerolog.Nop()})}
	go srv.Serve(ln)
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/agents/bench/tasks?wait=10s"
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()

	post := func(id string) error { return postWait(client, url, id) }
	for i := range clients { // one connection per client, open before the clock starts
		if err := post(fmt.Sprintf("warm-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	saves.Store(0)
	b.ResetTimer()
	el := runClients(b, clients, b.N, func(_ int, i int64) error { return post(fmt.Sprintf("t%d", i)) })
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(rate, "tasks/s")
	b.ReportMetric(float64(saves.Load())/float64(b.N), "saves/task")
	return rate
}

// postWait posts an echo task to url (a tasks route with ?wait=) and
// checks that the answer is its final state, done.
func postWait(c *http.Client, url, id string) error {
	resp, err := c.Post(url, "application/json", strings.NewReader(`{"task_id":"`+id+`","input":"payload"}`))
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"status":"done"`) {
		return fmt.Errorf("task %s: %d %s", id, resp.StatusCode, body)
	}
	return nil
}

// runClients sends n tasks from clients goroutines, each taking the next
// task number once its last task is done, and returns how long they took;
// the timer is stopped at the end, and b fails on the first error.
func runClients(b *testing.B, clients, n int, send func(client int, i int64) error) time.Duration {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		errs = make(chan error, clients)
	)
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if err := send(c, i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return el
}
