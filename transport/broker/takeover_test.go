package broker

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/rs/zerolog"

	"github.com/openstarry/openstarry-edge/internal/wait"
)

// TestTakeoverKeepsStoredMessages: messages queued for an offline
// persistent session stay in broker.db when the client reconnects and
// before it acknowledges them, so a broker that stops then still delivers
// them after its restart.
func TestTakeoverKeepsStoredMessages(t *testing.T) {
	dir := t.TempDir()
	b := startBroker(t, Config{DataDir: dir})
	url := b.URL()
	sub := connect(t, url, "sub", "", "", false, nil)
	if sub.err != nil {
		t.Fatal(sub.err)
	}
	if tok := sub.client.Subscribe("t/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	sub.client.Disconnect(50)
	pub := connect(t, url, "pub", "", "", true, nil)
	const n = 5
	for i := range n {
		if tok := pub.client.Publish("t/x", 1, false, fmt.Sprint(i)); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
			t.Fatalf("publish: %v", tok.Error())
		}
	}
	pub.client.Disconnect(50)
	// The subscriber comes back and takes the messages, but never
	// acknowledges them: its handler does not return.
	block := make(chan struct{})
	defer close(block)
	var mu sync.Mutex
	got := 0
	taker := paho.NewClient(paho.NewClientOptions().AddBroker(url).SetClientID("sub").SetCleanSession(false).
		SetProtocolVersion(4).SetAutoReconnect(false).SetOrderMatters(true).
		SetDefaultPublishHandler(func(paho.Client, paho.Message) {
			mu.Lock()
			got++
			mu.Unlock()
			<-block
		}))
	if tok := taker.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	wait.For(t, 5*time.Second, "the first message to reach the subscriber", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got > 0
	})
	b.Close()
	taker.Disconnect(0)

	b2 := startBroker(t, Config{DataDir: dir})
	seen := map[string]bool{}
	again := connect(t, b2.URL(), "sub", "", "", false, func(_ paho.Client, m paho.Message) {
		mu.Lock()
		seen[string(m.Payload())] = true
		mu.Unlock()
	})
	if again.err != nil {
		t.Fatal(again.err)
	}
	defer again.client.Disconnect(50)
	wait.For(t, 10*time.Second, fmt.Sprintf("the %d messages after the restart", n), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
}

// TestTakeoverUnderLoad: a persistent subscriber reconnects again and
// again while messages are published to it; every message reaches it.
// (Without takeoverHook, 31 of 600 were lost through 987 reconnections.)
func TestTakeoverUnderLoad(t *testing.T) {
	// Quiet: every reconnection that closes before mochi resent what the
	// session had in flight logs a warning.
	b, err := Start(context.Background(), Config{Listen: "127.0.0.1:0", DataDir: t.TempDir(),
		Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	url := b.URL()
	var mu sync.Mutex
	seen := map[string]bool{}
	handler := func(_ paho.Client, m paho.Message) {
		mu.Lock()
		seen[string(m.Payload())] = true
		mu.Unlock()
	}
	sub := connect(t, url, "sub", "", "", false, handler)
	if sub.err != nil {
		t.Fatal(sub.err)
	}
	if tok := sub.client.Subscribe("t/#", 1, nil); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribe: %v", tok.Error())
	}
	pub := connect(t, url, "pub", "", "", true, nil)
	defer pub.client.Disconnect(50)
	const n = 300
	done := make(chan error, 1)
	go func() {
		for i := range n {
			tok := pub.client.Publish("t/x", 1, false, fmt.Sprint(i))
			if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
				done <- fmt.Errorf("publish %d: %v", i, tok.Error())
				return
			}
		}
		done <- nil
	}()
	cur := sub.client
	reconnects := 0
	for publishing := true; publishing; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			publishing = false
		default:
		}
		if !publishing {
			break
		}
		if reconnects == 150 { // enough: let the publisher finish
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			break
		}
		time.Sleep(10 * time.Millisecond) // a burst of messages, then a reconnection
		cur.Disconnect(0)
		c := connect(t, url, "sub", "", "", false, handler)
		if c.err != nil {
			t.Fatal(c.err)
		}
		cur = c.client
		reconnects++
	}
	defer cur.Disconnect(50)
	deadline := time.Now().Add(30 * time.Second)
	for {
		mu.Lock()
		got := len(seen)
		var missing []int
		for i := range n {
			if !seen[fmt.Sprint(i)] {
				missing = append(missing, i)
			}
		}
		mu.Unlock()
		if got == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages through %d reconnections; missing %v", got, n, reconnects, missing)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d messages, %d reconnections of the subscriber", n, reconnects)
}
