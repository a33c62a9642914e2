package daemon

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestProxyKeepsConnections: concurrent clients of the daemon's listener
// reach the agent on connections the daemon keeps, not on a new one per
// request: 16 clients, each with 4 requests in flight together, open about
// 16 connections to the agent, not one per request above the few kept idle.
func TestProxyKeepsConnections(t *testing.T) {
	e := startEnv(t, testConfig(t), testResolver(nil), nil)
	const clients, rounds = 16, 4
	var round *sync.WaitGroup
	var mu sync.Mutex
	e.agents.mu.Lock()
	e.agents.gate = func() { // every round's requests are in flight together
		mu.Lock()
		wg := round
		mu.Unlock()
		wg.Done()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	}
	e.agents.mu.Unlock()
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}, Timeout: 20 * time.Second}
	defer cl.CloseIdleConnections()
	for r := range rounds {
		mu.Lock()
		round = &sync.WaitGroup{}
		round.Add(clients)
		mu.Unlock()
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := cl.Post(e.d.httpd.address()+"/agents/master/tasks", "application/json",
					strings.NewReader(fmt.Sprintf(`{"task_id":"r%d-c%d","input":"x"}`, r, c)))
				if err != nil {
					errs <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusAccepted {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	e.agents.mu.Lock()
	n := len(e.agents.remotes)
	e.agents.mu.Unlock()
	if n > clients+clients/2 {
		t.Fatalf("%d requests in rounds of %d reached the agent on %d connections: the daemon does not keep them", clients*rounds, clients, n)
	}
}
