package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/openstarry/openstarry-edge/core/agent"
	"github.com/openstarry/openstarry-edge/core/brain"
	"github.com/openstarry/openstarry-edge/core/plugin"
	"github.com/openstarry/openstarry-edge/core/update"
)

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print the version, commit, build date, platform, and the stores and brains compiled in",
		Long: `Print the version, commit, build date, platform, and the stores and brains
compiled in. --json prints what a self-update compares before it installs a
binary: version, commit, date, goos, goarch, goarm, and snapshot_schema (the
schema_version of the snapshots this build writes) and snapshot_schema_read
(the newest it loads).`,
		Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			if asJSON {
				b, _ := json.Marshal(selfInfo())
				fmt.Fprintln(cmd.OutOrStdout(), string(b))
				return
			}
			printVersion(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (what openstarry update reads from a candidate)")
	return cmd
}

// selfInfo is this binary as `version --json` describes it.
func selfInfo() update.Info {
	in := update.Info{Version: version, Commit: commit, Date: date, GOOS: runtime.GOOS, GOARCH: runtime.GOARCH,
		GOARM: readBuildInfo().goarm, SnapshotSchema: agent.SchemaVersion, SnapshotSchemaRead: agent.SchemaVersion}
	in.SnapshotSchema = faultSchema(in.SnapshotSchema)
	in.SnapshotSchemaRead = faultSchema(in.SnapshotSchemaRead)
	return in
}

// buildInfo is what the binary knows about its own build: the ARM variant
// (GOARM) and the build tags, from the build settings the go command
// records in every binary.
type buildInfo struct {
	goarm string // "6", "7" (possibly ",softfloat"); "" off 32-bit ARM
	tags  string // comma-separated; "" for the standard build
}

func readBuildInfo() buildInfo {
	var b buildInfo
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOARM":
			b.goarm = s.Value
		case "-tags":
			b.tags = s.Value
		}
	}
	return b
}

// platform is GOOS/GOARCH, with the ARM variant on 32-bit ARM:
// "linux/arm (armv7)".
func platform(goos, goarch, goarm string) string {
	p := goos + "/" + goarch
	if goarch == "arm" && goarm != "" {
		v, _, _ := strings.Cut(goarm, ",")
		p += " (armv" + v + ")"
	}
	return p
}

func printVersion(w io.Writer) {
	b := readBuildInfo()
	fmt.Fprintf(w, "openstarry %s\ncommit: %s\nbuilt: %s\nplatform: %s\ngo: %s\n",
		version, commit, date, platform(runtime.GOOS, runtime.GOARCH, b.goarm), runtime.Version())
	tags := b.tags
	if tags == "" {
		tags = "none (standard build)"
	}
	fmt.Fprintf(w, "build tags: %s\n", tags)
	var stores []string
	for _, info := range plugin.List(plugin.KindStorage) {
		stores = append(stores, info.Name())
	}
	fmt.Fprintf(w, "stores: %s\n", strings.Join(stores, " "))
	if left := omitted(plugin.KindStorage); left != "" {
		fmt.Fprintf(w, "left out: %s\n", left)
	}
	var engines []string
	for _, info := range plugin.List(plugin.KindMemory) {
		engines = append(engines, info.Name())
	}
	line := strings.Join(engines, " ")
	if left := omitted(plugin.KindMemory); left != "" {
		line += "; left out: " + left
	}
	fmt.Fprintf(w, "memory engines: %s\n", line)
	fmt.Fprintf(w, "session continuity: %s\n", sessionsCompiledIn)
	fmt.Fprintf(w, "mcp tools: %s\n", mcpCompiledIn)
	fmt.Fprintf(w, "enrolment hub: %s\n", hubCompiledIn)
	fmt.Fprintf(w, "http: %s\n", httpProtocols)
	fmt.Fprintf(w, "brains: %s\n", strings.Join(brain.Providers(), " "))
}

// omitted lists the plugins of a kind this build left out, each with its
// tag, sorted: "file (nofile) redis (noredis)".
func omitted(kind plugin.Kind) string {
	var left []string
	for id, tag := range plugin.Omitted() {
		if k, name, _ := strings.Cut(id, "."); k == string(kind) {
			left = append(left, fmt.Sprintf("%s (%s)", name, tag))
		}
	}
	sort.Strings(left)
	return strings.Join(left, " ")
}
