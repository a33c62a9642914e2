// Command benchtargets prints the figures of issue #35's targets beside
// their baselines. It reads what `go test -bench` (and ./build.sh matrix,
// for the binaries' headroom) print on its standard input, passes every
// line through to its standard output as it comes, and at the end prints
// one table: each figure of targets.json, its value in this run, its
// baseline and where that was recorded, its goal, and whether this run
// reached it. make bench pipes its benchmarks through it:
//
//	go test -run '^$' -bench 'EndToEnd|DaemonBoot' ./cmd/openstarry/ | go run ./internal/benchtargets
//	go run ./internal/benchtargets < saved-bench-output.txt
//
// The baselines live in targets.json, beside this file, not in the
// benchmarks: a benchmark reports its figures as it always did, and a
// change to one needs no change here unless it renames a figure
// (TestTargetsReported checks that every figure named is still reported).
// It exits 1 when the input shows a failed test or benchmark, so that a
// pipeline through it still fails.
package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

//go:embed targets.json
var targetsJSON []byte

// Figure is one figure of a target and its baseline.
type Figure struct {
	Target   string  `json:"target"`
	Bench    string  `json:"bench"`
	Metric   string  `json:"metric"`
	Baseline Range   `json:"baseline"`
	Goal     float64 `json:"goal"`
	Better   string  `json:"better"`
	Source   string  `json:"source"`
}

// Range is a baseline: one figure, or the low and high of several runs.
type Range struct{ Low, High float64 }

func (r *Range) UnmarshalJSON(b []byte) error {
	var one float64
	if err := json.Unmarshal(b, &one); err == nil {
		*r = Range{one, one}
		return nil
	}
	var two []float64
	if err := json.Unmarshal(b, &two); err != nil || len(two) != 2 || two[0] > two[1] {
		return fmt.Errorf("baseline %s: want a number or [low, high]", b)
	}
	*r = Range{two[0], two[1]}
	return nil
}

func (r Range) String() string {
	if r.Low == r.High {
		return num(r.Low)
	}
	return num(r.Low) + "-" + num(r.High)
}

type targets struct {
	Issue   int      `json:"issue"`
	About   string   `json:"about"`
	Figures []Figure `json:"figures"`
}

func load(data []byte) (targets, error) {
	var t targets
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return t, fmt.Errorf("targets.json: %w", err)
	}
	for i, f := range t.Figures {
		if f.Bench == "" || f.Metric == "" || f.Target == "" || f.Source == "" || (f.Better != "lower" && f.Better != "higher") {
			return t, fmt.Errorf("targets.json: figure %d (%s %s): target, bench, metric, source and better (lower or higher) are required", i, f.Bench, f.Metric)
		}
	}
	return t, nil
}

var (
	// BenchmarkEndToEndHTTP/clients=8-2   300   0.41 cpu-ms/task   5012 tasks/s ...
	benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	// dist/openstarry-windows-amd64.exe  16.99 MiB  windows/amd64  static  (budget 20 MiB)  headroom 3.01 MiB
	sizeLine = regexp.MustCompile(`^(\S+)\s+([0-9.]+) MiB\s+\S+\s+static\s+\(budget [0-9.]+ MiB\)\s+headroom (-?[0-9.]+) MiB`)
	// checkbin: dist/openstarry-small-linux-armv6: 10.97 MiB leaves 0.03 MiB of the budget ...
	sizeFail = regexp.MustCompile(`^checkbin: (\S+): [0-9.]+ MiB leaves (-?[0-9.]+) MiB of the budget`)
)

// results gathers every figure of the input by benchmark and metric.
type results map[string][]float64

func key(bench, metric string) string { return bench + " " + metric }

// scan copies in to out line by line and gathers the figures; failed says
// whether a test, a benchmark or a build failed.
func scan(in io.Reader, out io.Writer) (r results, failed bool, err error) {
	r = results{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if out != nil {
			fmt.Fprintln(out, line)
		}
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") || strings.HasPrefix(line, "panic: ") {
			failed = true
		}
		if m := benchLine.FindStringSubmatch(line); m != nil {
			f := strings.Fields(m[2])
			for i := 0; i+1 < len(f); i += 2 {
				if v, err := strconv.ParseFloat(f[i], 64); err == nil {
					r[key(m[1], f[i+1])] = append(r[key(m[1], f[i+1])], v)
				}
			}
			continue
		}
		if m := sizeLine.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[3], 64)
			r[key(base(m[1]), "headroom-MiB")] = append(r[key(base(m[1]), "headroom-MiB")], v)
			continue
		}
		if m := sizeFail.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[2], 64)
			r[key(base(m[1]), "headroom-MiB")] = append(r[key(base(m[1]), "headroom-MiB")], v)
		}
	}
	return r, failed, sc.Err()
}

func base(path string) string { return path[strings.LastIndexAny(path, `/\`)+1:] }

// median of the runs of one figure (go test -count N prints N lines).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func num(v float64) string {
	switch a := max(v, -v); {
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

// table writes one row per figure of t: this run's value (the median when
// the input has several), the baseline, the goal and whether it is met.
func table(w io.Writer, t targets, r results) {
	fmt.Fprintf(w, "\nissue #%d: each figure of this run beside its baseline\n", t.Issue)
	const row = "%-34s %-44s %-18s %9s %12s  %-36s %9s  %s\n"
	fmt.Fprintf(w, row, "target", "benchmark", "figure", "this run", "baseline", "baseline measured at", "goal", "")
	for _, f := range t.Figures {
		goal := "<= " + num(f.Goal)
		if f.Better == "higher" {
			goal = ">= " + num(f.Goal)
		}
		run, verdict := "-", "not in this run"
		if v, ok := r[key(f.Bench, f.Metric)]; ok {
			m := median(v)
			run = num(m)
			switch {
			case f.Better == "lower" && m <= f.Goal, f.Better == "higher" && m >= f.Goal:
				verdict = "met"
			default:
				verdict = "not met"
			}
			if f.Baseline.Low > 0 {
				verdict += fmt.Sprintf(" (%.2fx the baseline)", m/((f.Baseline.Low+f.Baseline.High)/2))
			}
		}
		fmt.Fprintf(w, row, f.Target, f.Bench, f.Metric, run, f.Baseline.String(), f.Source, goal, verdict)
	}
}

func main() {
	t, err := load(targetsJSON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(2)
	}
	r, failed, err := scan(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets: reading the benchmarks' output:", err)
		os.Exit(1)
	}
	table(os.Stdout, t, r)
	if failed {
		fmt.Fprintln(os.Stderr, "benchtargets: a test, benchmark or build above failed")
		os.Exit(1)
	}
}
