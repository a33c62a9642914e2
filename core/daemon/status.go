package daemon

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/daemon/control"
	"github.com/openstarry/openstarry-edge/core/metrics"
)

// The status of the daemon and its agents, as `openstarry status`, GET
// /status and GET /v1/status show it.

// status describes the daemon and its agents; with snaps, each running
// agent is asked for its snapshot (tick, queue, outbox) in parallel.
func (d *Daemon) status(ctx context.Context, snaps bool) control.Status {
	ms := d.sortedMembers()
	d.mu.Lock()
	st := control.Status{PID: os.Getpid(), Version: d.o.Version, Data: d.data, Started: d.started, HTTP: d.httpAddr,
		Phases: append([]control.Phase(nil), d.phases...), Interrupted: append([]control.Interruption(nil), d.interrupted...),
		StateStore: d.store, PreviousRun: d.previousRun, SessionsDamage: d.sessDamage}
	d.mu.Unlock()
	st.Notice = BootNotice(d.data)
	st.Agents = make([]control.AgentInfo, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		st.Agents[i] = m.info()
		if !snaps || st.Agents[i].State != control.StateRunning {
			continue
		}
		wg.Add(1)
		go func(a *control.AgentInfo) {
			defer wg.Done()
			d.fillSnapshot(ctx, a)
		}(&st.Agents[i])
	}
	wg.Wait()
	return st
}

// BootNoticeFile is the file, in the data directory, where the image's
// first boot (packaging/image) writes what it could not do; the status
// shows it as Notice.
const BootNoticeFile = "boot-notice"

// BootNotice reads DATA/boot-notice: at most 4 KiB of it, trimmed; "" when
// there is none.
func BootNotice(data string) string {
	f, err := os.Open(filepath.Join(data, BootNoticeFile))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "?"))
}

// snapInfo is what status reads of an agent's snapshot.
type snapInfo struct {
	TickIndex uint64            `json:"tick_index"`
	Status    string            `json:"status"`
	Queue     []json.RawMessage `json:"event_queue_backup"`
	Outbox    []json.RawMessage `json:"outbox"`
	Memory    struct {
		History []agent.Message `json:"short_term_history"`
	} `json:"memory"`
}

func (d *Daemon) fillSnapshot(ctx context.Context, a *control.AgentInfo) {
	var s snapInfo
	if !d.askAgent(ctx, a.Addr+"/agents/"+a.ID+"/snapshot", func(body io.Reader) error {
		return json.NewDecoder(io.LimitReader(body, 256<<20)).Decode(&s)
	}) {
		return
	}
	a.Snapshot, a.Tick, a.Queue, a.Outbox, a.SnapshotStatus = true, s.TickIndex, len(s.Queue), len(s.Outbox), s.Status
	d.askAgent(ctx, a.Addr+"/metrics", func(body io.Reader) error {
		fams := metrics.Families(io.LimitReader(body, 4<<20), "openstarry_agent_store_")
		a.StoreDamage, a.StoreRepaired = counterOf(fams[metrics.StoreDamageTotal]), counterOf(fams[metrics.StoreRepairTotal])
		return nil
	})
	var cur *control.CurrentTask
	if d.askAgent(ctx, a.Addr+"/agents/"+a.ID+"/current", func(body io.Reader) error {
		return json.NewDecoder(io.LimitReader(body, 64<<10)).Decode(&cur)
	}) {
		a.Current = cur
	}
	for i := len(s.Memory.History) - 1; i >= 0; i-- {
		if m := s.Memory.History[i]; m.Role == "assistant" && m.TaskID != "" {
			a.LastTask, a.LastResult = m.TaskID, clipRunes(m.Content, 200)
			break
		}
	}
}

// counterOf returns the value of a family of one unlabelled sample, 0
// without one.
func counterOf(f *metrics.Family) uint64 {
	if f == nil || len(f.Lines) != 1 {
		return 0
	}
	fields := strings.Fields(f.Lines[0])
	if len(fields) < 2 {
		return 0
	}
	v, err := strconv.ParseFloat(fields[1], 64)
	if err != nil || v < 0 {
		return 0
	}
	return uint64(v)
}

// clipRunes cuts s to at most n characters, at a character boundary.
func clipRunes(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}

// askAgent GETs url of an agent's loopback API, within 2 seconds, and
// hands a 200 answer's body to read; it reports whether both succeeded.
// Any other answer is drained and false.
func (d *Daemon) askAgent(ctx context.Context, url string, read func(body io.Reader) error) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return false
	}
	resp, err := d.httpc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return false
	}
	return read(resp.Body) == nil
}
