package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkEndToEndHTTP/sequential-2         	     300	         1.020 median-ms/task	         0.2400 raw-ms	         4.250 x_raw
BenchmarkEndToEndHTTP/clients=8-2          	     300	         0.3000 cpu-ms/task	      3107 tasks/s
BenchmarkEndToEndHTTP/clients=8-2          	     300	         0.2000 cpu-ms/task	      3107 tasks/s
BenchmarkEndToEndHTTP/clients=8-2          	     300	         0.1000 cpu-ms/task	      3107 tasks/s
BenchmarkMQTTIngress/embedded-2            	    2000	      0.9000 relay-ratio
BenchmarkDaemonBoot/mqtt=off-2             	       5	        13.86 agent_MiB	         2.465 agent_private_MiB
dist/openstarry-windows-amd64.exe             17.02 MiB  windows/amd64  static  (budget 20 MiB)  headroom 2.98 MiB
checkbin: dist/openstarry-small-linux-armv6: 10.97 MiB leaves 0.03 MiB of the budget of 11.00 MiB, less than the 1.00 MiB of headroom a release needs
ok  	github.com/openstarry/openstarry-edge/cmd/openstarry	15.740s
`

// TestScan: every figure of a benchmark line is read under its name
// without the GOMAXPROCS suffix, build.sh's headroom lines too, and the
// input is passed through untouched.
func TestScan(t *testing.T) {
	var out bytes.Buffer
	r, failed, err := scan(strings.NewReader(sample), &out)
	if err != nil || failed {
		t.Fatalf("scan: %v, failed %v", err, failed)
	}
	if out.String() != sample {
		t.Errorf("the input was not passed through:\n%s", out.String())
	}
	for k, want := range map[string]float64{
		"BenchmarkEndToEndHTTP/sequential x_raw":         4.25,
		"BenchmarkEndToEndHTTP/clients=8 cpu-ms/task":    0.2, // the median of three
		"BenchmarkEndToEndHTTP/clients=8 tasks/s":        3107,
		"BenchmarkMQTTIngress/embedded relay-ratio":      0.9,
		"BenchmarkDaemonBoot/mqtt=off agent_private_MiB": 2.465,
		"openstarry-windows-amd64.exe headroom-MiB":      2.98,
		"openstarry-small-linux-armv6 headroom-MiB":      0.03,
	} {
		if v, ok := r[k]; !ok || median(v) != want {
			t.Errorf("%s: %v, want %v", k, v, want)
		}
	}
}

// TestScanFailed: a failed test, benchmark or build in the input is
// reported, so that make bench fails.
func TestScanFailed(t *testing.T) {
	for _, line := range []string{
		"--- FAIL: BenchmarkEndToEndHTTP",
		"FAIL\tgithub.com/openstarry/openstarry-edge/cmd/openstarry\t3.1s",
		"FAIL\tgithub.com/openstarry/openstarry-edge/cmd/openstarry [build failed]",
		"panic: test timed out after 30m0s",
	} {
		if _, failed, _ := scan(strings.NewReader(sample+line+"\n"), nil); !failed {
			t.Errorf("%q is not a failure", line)
		}
	}
}

// TestTable: each figure is printed with this run's value, its baseline,
// its goal and the verdict; a figure the run did not measure says so.
func TestTable(t *testing.T) {
	tg, err := load([]byte(`{"issue": 35, "figures": [
	  {"target": "1", "bench": "BenchmarkEndToEndHTTP/clients=8", "metric": "cpu-ms/task", "baseline": 0.38, "goal": 0.19, "better": "lower", "source": "#35"},
	  {"target": "2", "bench": "BenchmarkEndToEndHTTP/sequential", "metric": "x_raw", "baseline": [4.0, 4.2], "goal": 3, "better": "lower", "source": "#35"},
	  {"target": "3", "bench": "BenchmarkMQTTIngress/embedded", "metric": "relay-ratio", "baseline": 0.44, "goal": 0.8, "better": "higher", "source": "#35"},
	  {"target": "3", "bench": "BenchmarkMQTTIngress/mosquitto", "metric": "relay-ratio", "baseline": 0.28, "goal": 0.8, "better": "higher", "source": "#35"},
	  {"target": "5", "bench": "openstarry-small-linux-armv6", "metric": "headroom-MiB", "baseline": 0.05, "goal": 1, "better": "higher", "source": "main"}
	]}`))
	if err != nil {
		t.Fatal(err)
	}
	r, _, _ := scan(strings.NewReader(sample), nil)
	var out bytes.Buffer
	table(&out, tg, r)
	for _, want := range []string{
		`BenchmarkEndToEndHTTP/clients=8 +cpu-ms/task +0\.200 +0\.380 +#35 +<= 0\.190 +not met \(0\.53x the baseline\)`,
		`BenchmarkEndToEndHTTP/sequential +x_raw +4\.25 +4\.00-4\.20 +#35 +<= 3\.00 +not met`,
		`BenchmarkMQTTIngress/embedded +relay-ratio +0\.900 +0\.440 +#35 +>= 0\.800 +met`,
		`BenchmarkMQTTIngress/mosquitto +relay-ratio +- +0\.280 +#35 +>= 0\.800 +not in this run`,
		`openstarry-small-linux-armv6 +headroom-MiB +0\.030 +0\.050 +main +>= 1\.00 +not met`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("no line matching %s in\n%s", want, out.String())
		}
	}
}

// TestLoadRefuses: a figure without what the table needs is refused.
func TestLoadRefuses(t *testing.T) {
	for _, bad := range []string{
		`{"issue": 35, "figures": [{"target": "1", "bench": "B", "metric": "m", "baseline": 1, "goal": 1, "better": "less", "source": "s"}]}`,
		`{"issue": 35, "figures": [{"target": "1", "bench": "B", "metric": "m", "baseline": [2, 1], "goal": 1, "better": "lower", "source": "s"}]}`,
		`{"issue": 35, "figures": [{"target": "1", "bench": "B", "metric": "m", "baseline": 1, "goal": 1, "better": "lower"}]}`,
		`{"issue": 35, "figures": [{"target": "1", "bench": "B", "metric": "m", "baseline": 1, "goal": 1, "better": "lower", "source": "s", "extra": 1}]}`,
	} {
		if _, err := load([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// TestTargetsReported: every figure targets.json names is still reported:
// its benchmark function exists in the repository and some benchmark of
// the repository reports its unit (or build.sh's check prints the
// headroom). A benchmark renamed without this file would otherwise show
// "not in this run" for ever.
func TestTargetsReported(t *testing.T) {
	tg, err := load(targetsJSON)
	if err != nil {
		t.Fatal(err)
	}
	var src bytes.Buffer
	err = filepath.WalkDir("../..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == "third_party") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, "_test.go") || strings.HasSuffix(p, "storagetest/bench.go") || strings.HasSuffix(p, "checkbin/main.go") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tg.Figures {
		if !strings.HasPrefix(f.Bench, "Benchmark") {
			if f.Metric != "headroom-MiB" || !strings.Contains(src.String(), "headroom %.2f MiB") {
				t.Errorf("%s %s: not a benchmark, and not a binary's headroom that checkbin prints", f.Bench, f.Metric)
			}
			continue
		}
		fn, _, _ := strings.Cut(f.Bench, "/")
		if !strings.Contains(src.String(), "func "+fn+"(b *testing.B)") {
			t.Errorf("%s: no func %s in the repository", f.Bench, fn)
		}
		if !strings.Contains(src.String(), `"`+f.Metric+`"`) {
			t.Errorf("%s: no benchmark reports %q", f.Bench, f.Metric)
		}
	}
}
