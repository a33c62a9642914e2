package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/storage/bbolt"
	"github.com/openstarry/openstarry-edge/storage/storagetest"
)

// cli runs the binary and returns stdout, stderr and the exit code.
func cli(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// TestSnapshotCommands: show, export, delete, import and migrate through the
// binary, on real stores.
func TestSnapshotCommands(t *testing.T) {
	data := t.TempDir()
	st, err := bbolt.Open(filepath.Join(data, "agents"), bbolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := make(map[string][]byte)
	for _, id := range []string{"s1", "s2", "s3"} {
		s := storagetest.Sample(id, 5)
		if err := st.Save(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		want[id], _ = agent.Encode(s)
	}
	st.Close()

	out, errs, code := cli(t, "snapshot", "show", "--agent", "s1", "--data", data)
	if code != 0 || strings.TrimSpace(out) != string(want["s1"]) {
		t.Fatalf("show: %d %s %s", code, out, errs)
	}
	file := filepath.Join(t.TempDir(), "s1.json")
	if _, errs, code := cli(t, "snapshot", "export", "--agent", "s1", "--data", data, "--out", file); code != 0 {
		t.Fatalf("export: %d %s", code, errs)
	}
	if _, errs, code := cli(t, "snapshot", "delete", "--agent", "s1", "--data", data); code != 0 {
		t.Fatalf("delete: %d %s", code, errs)
	}
	if _, errs, code := cli(t, "snapshot", "show", "--agent", "s1", "--data", data); code == 0 || !strings.Contains(errs, "no snapshot stored") {
		t.Fatalf("show after delete: %d %s", code, errs)
	}
	// Deleting what is not there says so and fails.
	if _, errs, code := cli(t, "snapshot", "delete", "--agent", "s1", "--data", data); code != 1 || !strings.Contains(errs, "nothing to delete: no agent s1") {
		t.Fatalf("delete again: %d %s", code, errs)
	}
	if _, errs, code := cli(t, "snapshot", "delete", "--agent", "nosuch", "--data", data); code != 1 || !strings.Contains(errs, "nothing to delete") || strings.Contains(errs, "deleted agent") {
		t.Fatalf("delete of an unknown agent: %d %s", code, errs)
	}
	if _, errs, code := cli(t, "snapshot", "import", "--agent", "s2", "--data", data, "--in", file); code == 0 || !strings.Contains(errs, `not "s2"`) {
		t.Fatalf("import under another id: %d %s", code, errs)
	}
	if _, errs, code := cli(t, "snapshot", "import", "--agent", "s1", "--data", data, "--in", file); code != 0 {
		t.Fatalf("import: %d %s", code, errs)
	}
	if _, errs, code := cli(t, "snapshot", "import", "--agent", "s1", "--data", data, "--in", file); code == 0 || !strings.Contains(errs, "--force") {
		t.Fatalf("import over an existing snapshot: %d %s", code, errs)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"agent_id":"s1","tick_index":"x"}`), 0o600)
	if _, errs, code := cli(t, "snapshot", "import", "--agent", "s1", "--data", data, "--in", bad, "--force"); code == 0 || !strings.Contains(errs, "invalid snapshot") {
		t.Fatalf("import of a broken file: %d %s", code, errs)
	}

	sqliteURL := "sqlite://" + filepath.Join(data, "state.db")
	out, errs, code = cli(t, "snapshot", "migrate", "--from", "bbolt://"+filepath.Join(data, "agents"), "--to", sqliteURL)
	if code != 0 || !strings.Contains(out, "migrated 3 agents") {
		t.Fatalf("migrate: %d %s %s", code, out, errs)
	}
	for id, w := range want {
		out, errs, code := cli(t, "snapshot", "show", "--agent", id, "--store", sqliteURL)
		if code != 0 || strings.TrimSpace(out) != string(w) {
			t.Fatalf("show %s from sqlite: %d %s %s", id, code, out, errs)
		}
	}
	if _, errs, code := cli(t, "snapshot", "show", "--agent", "../etc", "--data", data); code == 0 || !strings.Contains(errs, "invalid id") {
		t.Fatalf("bad id: %d %s", code, errs)
	}
}
