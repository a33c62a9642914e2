package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
)

// DefaultStages are the waves of a staged update: a canary device, then
// up to a tenth of the fleet, then the rest.
const DefaultStages = "1,10%,100%"

// ParseStages reads stages such as "1,10%,100%": each is how many devices
// (a count, or a percentage of the fleet, rounded up) have been updated
// once its wave is done. They must grow, and the last must be 100%.
func ParseStages(s string) ([]string, error) {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		parts[i] = p
		if _, err := stageTarget(p, 100); err != nil {
			return nil, err
		}
	}
	if parts[len(parts)-1] != "100%" {
		return nil, fmt.Errorf("stages %q: the last stage must be 100%% (every device)", s)
	}
	return parts, nil
}

func stageTarget(p string, total int) (int, error) {
	if pct, ok := strings.CutSuffix(p, "%"); ok {
		v, err := strconv.ParseFloat(pct, 64)
		if err != nil || !(v > 0 && v <= 100) { // NaN too
			return 0, fmt.Errorf("stage %q: a percentage must be in (0, 100]", p)
		}
		return int(math.Ceil(v / 100 * float64(total))), nil
	}
	v, err := strconv.Atoi(p)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("stage %q: want a number of devices or a percentage (1, 10%%)", p)
	}
	return v, nil
}

// Waves splits devices (in their order) into the waves of stages; empty
// waves (a tenth of a small fleet that the canary already covers) are
// left out.
func Waves(devices, stages []string) ([][]string, error) {
	var waves [][]string
	done := 0
	for _, st := range stages {
		n, err := stageTarget(st, len(devices))
		if err != nil {
			return nil, err
		}
		n = min(n, len(devices))
		if n > done {
			waves = append(waves, devices[done:n])
			done = n
		}
	}
	return waves, nil
}

// UpdateFunc updates one device to the binary at url and returns its
// outcome (committed, rolled_back, aborted); an error when none came.
type UpdateFunc func(ctx context.Context, device, url string) (*Outcome, error)

// StagedUpdate is a staged rollout's plan.
type StagedUpdate struct {
	Devices     []string
	Stages      []string
	URL         string
	RollbackURL string // the previous release: a failed wave's committed devices go back to it
	Update      UpdateFunc
	Out         io.Writer
}

// ErrWaveFailed is returned when a device of a wave did not commit the
// update: the later waves were not started.
var ErrWaveFailed = errors.New("a device failed the update: the rollout stopped")

// Run updates the devices wave after wave, each wave's devices at once. A
// wave in which a device does not commit (rolled back by itself after its
// health check, aborted, or no outcome in time) halts the rollout: no
// later wave starts, and the devices of that wave that did commit are
// updated back with RollbackURL (or named, without it).
func (s StagedUpdate) Run(ctx context.Context) error {
	waves, err := Waves(s.Devices, s.Stages)
	if err != nil {
		return err
	}
	fmt.Fprintf(s.Out, "fleet update: %d devices in %d waves (%s) from %s\n", len(s.Devices), len(waves), strings.Join(s.Stages, ", "), s.URL)
	for w, wave := range waves {
		fmt.Fprintf(s.Out, "wave %d/%d: %s\n", w+1, len(waves), strings.Join(wave, " "))
		outs := s.updateAll(ctx, wave, s.URL)
		var failed, committed []string
		for _, dev := range wave {
			if o := outs[dev]; o.err == nil && o.outcome.State == UpdateCommitted {
				committed = append(committed, dev)
			} else {
				failed = append(failed, dev)
			}
		}
		if len(failed) == 0 {
			continue
		}
		left := 0
		for _, later := range waves[w+1:] {
			left += len(later)
		}
		fmt.Fprintf(s.Out, "wave %d/%d failed on %s: halted; %d devices of later waves not updated\n",
			w+1, len(waves), strings.Join(failed, " "), left)
		if len(committed) == 0 {
			return ErrWaveFailed
		}
		if s.RollbackURL == "" {
			fmt.Fprintf(s.Out, "not rolled back (no --rollback-url): %s run the new version\n", strings.Join(committed, " "))
			return ErrWaveFailed
		}
		fmt.Fprintf(s.Out, "rolling back wave %d/%d from %s: %s\n", w+1, len(waves), s.RollbackURL, strings.Join(committed, " "))
		s.updateAll(ctx, committed, s.RollbackURL)
		return ErrWaveFailed
	}
	fmt.Fprintf(s.Out, "fleet update: every device committed\n")
	return nil
}

type waveResult struct {
	outcome Outcome
	err     error
}

// updateAll updates devices at once and prints each outcome as it comes.
func (s StagedUpdate) updateAll(ctx context.Context, devices []string, url string) map[string]waveResult {
	var mu sync.Mutex
	res := map[string]waveResult{}
	var wg sync.WaitGroup
	for _, dev := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := s.Update(ctx, dev, url)
			mu.Lock()
			defer mu.Unlock()
			var r waveResult
			switch {
			case err != nil:
				r.err = err
				fmt.Fprintf(s.Out, "  %s: failed: %v\n", dev, err)
			default:
				r.outcome = *o
				line := fmt.Sprintf("  %s: %s (%s → %s, running %s)", dev, o.State, o.From, o.To, o.Running)
				if o.Reason != "" {
					line += ": " + o.Reason
				}
				fmt.Fprintln(s.Out, line)
			}
			res[dev] = r
		}()
	}
	wg.Wait()
	return res
}

// OutcomeOf reads the outcome carried by an update's second reply.
func OutcomeOf(r *Reply) (*Outcome, error) {
	var o Outcome
	if err := json.Unmarshal(r.Result, &o); err != nil || o.State == "" {
		return nil, fmt.Errorf("the device's reply carries no outcome: %s", r.Result)
	}
	return &o, nil
}
