//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openstarry/openstarry-edge/internal/wait"
	"github.com/openstarry/openstarry-edge/transport/fleet"
	"github.com/openstarry/openstarry-edge/transport/mqtt/mqtttest"
)

// TestDaemonScrub: a bit of the master's journal rots on the disk while it
// runs. Its scrub (scrub_interval 1s here) finds it, logs it, rewrites the
// saves from the copy it holds in memory (a fold into state.db), and the
// damage shows in `openstarry status`, the status JSON, the daemon's
// /metrics and the device's telemetry on a Mosquitto hub; the master killed
// then comes back with every task and no word of a damaged journal.
func TestDaemonScrub(t *testing.T) {
	m := mqtttest.StartMosquitto(t, mqtttest.Options{})
	data := dataDir(t)
	c := startDaemon(t, daemonConfig(t, data, "scrub_interval: 1s\n"+
		"mqtt:\n  broker: "+m.URL()+"\n  device: scrubdev\n  telemetry_interval: 1s\n"))
	base := c.url()
	tele := mqtttest.Collect(t, m.URL(), "scrub-test-telemetry", true, "openstarry/scrubdev/telemetry")
	var tasks []string
	for i := 0; i < 6; i++ {
		id := fmt.Sprintf("s%d", i)
		if code, body, err := postTask(t.Context(), base, "master", []byte(`{"task_id":"`+id+`","input":"x"}`)); err != nil || code != 202 {
			t.Fatalf("task %s: %d %s %v", id, code, body, err)
		}
		waitTask(t, base, "master", id)
		tasks = append(tasks, id)
	}
	c.waitLog("scrub: the store's files read back without damage", 60*time.Second)

	// Rot: one bit of the second record, written through another file
	// descriptor, as the card would return it.
	jpath := filepath.Join(data, "agents", "master", "state.journal")
	recs := journalRecords(t, jpath)
	if len(recs) < 2 {
		t.Fatalf("%d journal records after 6 tasks; want at least 2", len(recs))
	}
	f, err := os.OpenFile(jpath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	off := recs[1].off + 20
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	f.Close()

	c.waitLog("scrub: the store is damaged on the disk", 60*time.Second)
	c.waitLog("scrub: a damaged part was rewritten from a good copy", 10*time.Second)
	if !strings.Contains(c.logs(), jpath) {
		t.Fatalf("the scrub's lines do not name %s:\n%s", jpath, c.logs())
	}
	out, code := runCLI(t, "status", "--data", data)
	if code != 0 || !strings.Contains(out, "master: 1 damaged parts found, 1 rewritten from a good copy") {
		t.Fatalf("status (%d) does not show the damage:\n%s", code, out)
	}
	st := daemonStatus(t, data)
	if a := st.Agents[0]; a.StoreDamage != 1 || a.StoreRepaired != 1 {
		t.Fatalf("status JSON: store_damage %d, store_repaired %d; want 1, 1", a.StoreDamage, a.StoreRepaired)
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`openstarry_agent_store_damage_total{agent="master"} 1`, `openstarry_agent_store_repaired_total{agent="master"} 1`} {
		if !strings.Contains(string(page), want) {
			t.Fatalf("/metrics has no %q:\n%s", want, page)
		}
	}

	// The device's telemetry carries it.
	wait.For(t, 30*time.Second, "store_damage in the telemetry", func() bool {
		msgs := tele.Messages("")
		for i := len(msgs) - 1; i >= 0; i-- {
			var tm fleet.Telemetry
			if json.Unmarshal(msgs[i].Payload, &tm) == nil && len(tm.Agents) > 0 && tm.Agents[0].StoreDamage == 1 {
				return true
			}
		}
		return false
	})

	// The daemon scrubs sessions.db too.
	wait.For(t, 60*time.Second, "a scrub of sessions.db", func() bool {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		page, _ := io.ReadAll(resp.Body)
		return regexp.MustCompile(`(?m)^openstarry_sessions_db_scrubs_total [1-9]`).Match(page) &&
			strings.Contains(string(page), "openstarry_sessions_db_damage_total 0")
	})

	for _, l := range strings.Split(c.logs(), "\n") {
		if strings.Contains(l, "scrub:") {
			t.Log(l)
		}
	}

	// The master dies: it comes back with every task, from state.db.
	before := len(c.logs())
	pid := st.Agents[0].PID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 60*time.Second, "the master back", func() bool {
		a := daemonStatus(t, data).Agents[0]
		return a.PID != pid && a.PID != 0 && a.State == "running"
	})
	for _, id := range tasks {
		if code, ts, err := getTask(base, "master", id); err != nil || code != 200 || ts.Status != "done" {
			t.Errorf("task %s after the restart: %d %+v %v", id, code, ts, err)
		}
	}
	if after := c.logs()[before:]; strings.Contains(after, "journal is damaged") || strings.Contains(after, "does not check") {
		t.Fatalf("the restart still read the damaged journal:\n%s", after)
	}
}
