package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestCLIDocsEveryCommand: docs/cli.md's table names every command of the
// binary that people use (hidden ones, such as core, and help aside): a
// command added without its line there fails here. A code span such as
// `openstarry approval list\|approve\|reject` names the group and each of
// its subcommands.
func TestCLIDocsEveryCommand(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedCommands(string(raw))
	rootCmd := newRootCmd()
	rootCmd.InitDefaultCompletionCmd()
	var missing []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if !sub.IsAvailableCommand() {
				continue
			}
			path := strings.TrimPrefix(sub.CommandPath(), rootCmd.Name()+" ")
			if !documented[path] {
				missing = append(missing, path)
			}
			if sub.Parent() == rootCmd {
				walk(sub)
			}
		}
	}
	walk(rootCmd)
	if len(missing) > 0 {
		t.Errorf("docs/cli.md does not list: openstarry %s", strings.Join(missing, ", openstarry "))
	}
	for _, want := range []string{"status", "approval approve", "snapshot migrate", "completion", "hub token", "verify-release"} {
		if !documented[want] {
			t.Errorf("the parser missed %q in docs/cli.md", want)
		}
	}
}

var codeSpan = regexp.MustCompile("`(openstarry [^`]+)`")

// documentedCommands reads the command paths ("approval", "approval
// approve") that the table rows of docs/cli.md name.
func documentedCommands(doc string) map[string]bool {
	out := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(line, "| `openstarry ") {
			continue
		}
		cell := strings.SplitN(strings.TrimPrefix(line, "| "), " | ", 2)[0]
		for _, m := range codeSpan.FindAllStringSubmatch(cell, -1) {
			words := strings.Fields(strings.ReplaceAll(m[1], `\|`, "|"))
			if len(words) < 2 {
				continue
			}
			group := words[1]
			out[group] = true
			if len(words) > 2 && !strings.HasPrefix(words[2], "-") && !strings.HasPrefix(words[2], "[") && strings.ToLower(words[2]) == words[2] {
				for _, sub := range strings.Split(words[2], "|") {
					out[group+" "+sub] = true
				}
			}
		}
	}
	return out
}
