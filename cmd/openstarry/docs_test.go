package main

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The documentation's shell examples are run by TestDocs (docs_linux_test.go).
// This file holds the part that reads Markdown, which is the same on every
// platform: which fenced blocks run, which are only shown, and which show an
// output that is checked.
//
//	```sh          run, in order, in one bash -euo pipefail per file
//	```sh norun    shown only: a command that cannot run in the test (a
//	               remote hub, systemd, the source tree); counted in the log
//	```text expect the output of the nearest fenced block above it, which
//	               must be an sh block: every non-empty line must appear in
//	               that block's output, in order, as a whole line; "…"
//	               stands for any run of characters, and a run of spaces
//	               for any run of spaces (tables are aligned to their data)
//
// Any other info string that names a shell (bash, console, shell, sh with
// other words) is refused, so that an example is never silently skipped.

// docBlock is one fenced code block of a Markdown file.
type docBlock struct {
	file string
	line int    // 1-based line of the opening fence
	info string // the info string, spaces collapsed
	body string // the lines between the fences, each ending in \n
}

func (b docBlock) where() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// docKind says what TestDocs does with a block.
type docKind int

const (
	docShown  docKind = iota // any other block: shown to the reader only
	docRun                   // ```sh
	docNoRun                 // ```sh norun
	docExpect                // ```text expect
)

var shellInfo = regexp.MustCompile(`^(sh|bash|shell|console|zsh|shell-session)\b`)

// kind classifies a block, or says why its info string is refused.
func (b docBlock) kind() (docKind, error) {
	switch b.info {
	case "sh":
		return docRun, nil
	case "sh norun":
		return docNoRun, nil
	case "text expect":
		return docExpect, nil
	}
	if shellInfo.MatchString(b.info) || strings.HasPrefix(b.info, "text expect") {
		return docShown, fmt.Errorf("%s: info string %q: use `sh` (run by TestDocs), `sh norun` (shown only) or `text expect` (a checked output)", b.where(), b.info)
	}
	return docShown, nil
}

// parseDocBlocks returns the fenced blocks of a Markdown file. A fence is a
// line of three or more backticks, indented by at most three spaces; the
// block ends at a line of at least as many backticks and nothing else. An
// unclosed block is an error.
func parseDocBlocks(file, text string) ([]docBlock, error) {
	var blocks []docBlock
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		indent, fence, info, ok := openFence(lines[i])
		if !ok {
			continue
		}
		b := docBlock{file: file, line: i + 1, info: strings.Join(strings.Fields(info), " ")}
		var body strings.Builder
		closed := false
		for i++; i < len(lines); i++ {
			l := strings.TrimRight(lines[i], " \t\r")
			if t := strings.TrimLeft(l, " "); len(l)-len(t) <= 3 && strings.Trim(t, "`") == "" && len(t) >= fence {
				closed = true
				break
			}
			// Content lines lose the fence's indentation, as CommonMark says.
			l = lines[i]
			for n := 0; n < indent && strings.HasPrefix(l, " "); n++ {
				l = l[1:]
			}
			body.WriteString(strings.TrimRight(l, "\r") + "\n")
		}
		if !closed {
			return blocks, fmt.Errorf("%s: fenced block is never closed", b.where())
		}
		b.body = body.String()
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// openFence reports whether line opens a backtick fence, with its
// indentation, its length and its info string.
func openFence(line string) (indent, fence int, info string, ok bool) {
	line = strings.TrimRight(line, "\r")
	t := strings.TrimLeft(line, " ")
	indent = len(line) - len(t)
	if indent > 3 || !strings.HasPrefix(t, "```") {
		return 0, 0, "", false
	}
	fence = len(t) - len(strings.TrimLeft(t, "`"))
	info = strings.TrimSpace(t[fence:])
	if strings.Contains(info, "`") {
		return 0, 0, "", false
	}
	return indent, fence, info, true
}

// matchExpected checks that every non-empty line of want appears in got, in
// order, as a whole line (runs of spaces compare equal, trailing spaces are
// ignored); "…" in a wanted line matches any run of characters. It returns
// the first line not found.
func matchExpected(want, got string) (missing string, ok bool) {
	gotLines := strings.Split(strings.ReplaceAll(got, "\r", ""), "\n")
	at := 0
	for _, w := range strings.Split(want, "\n") {
		w = strings.TrimRight(w, " \t")
		if strings.TrimSpace(w) == "" {
			continue
		}
		parts := strings.Split(squeezeSpaces(w), "…")
		for i, p := range parts {
			parts[i] = regexp.QuoteMeta(p)
		}
		re := regexp.MustCompile("^" + strings.Join(parts, ".*") + "$")
		found := false
		for ; at < len(gotLines); at++ {
			if re.MatchString(squeezeSpaces(strings.TrimRight(gotLines[at], " \t"))) {
				found, at = true, at+1
				break
			}
		}
		if !found {
			return w, false
		}
	}
	return "", true
}

var spaces = regexp.MustCompile(` {2,}`)

func squeezeSpaces(s string) string { return spaces.ReplaceAllString(s, " ") }

func TestParseDocBlocks(t *testing.T) {
	md := "# title\n\n```sh\necho hi\n```\n\n```text expect\nhi\n```\n\n  ```sh norun\n  sudo reboot\n  ```\n\n````md\n```sh\nnot a block\n```\n````\n```bat\ndir\n```\n"
	blocks, err := parseDocBlocks("x.md", md)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		line int
		info string
		body string
		kind docKind
	}{
		{3, "sh", "echo hi\n", docRun},
		{7, "text expect", "hi\n", docExpect},
		{11, "sh norun", "sudo reboot\n", docNoRun},
		{15, "md", "```sh\nnot a block\n```\n", docShown},
		{20, "bat", "dir\n", docShown},
	}
	if len(blocks) != len(want) {
		t.Fatalf("got %d blocks, want %d: %+v", len(blocks), len(want), blocks)
	}
	for i, w := range want {
		b := blocks[i]
		k, err := b.kind()
		if b.line != w.line || b.info != w.info || b.body != w.body || k != w.kind || err != nil {
			t.Errorf("block %d = line %d info %q body %q kind %d err %v; want line %d info %q body %q kind %d",
				i, b.line, b.info, b.body, k, err, w.line, w.info, w.body, w.kind)
		}
	}
	if _, err := parseDocBlocks("y.md", "```sh\necho\n"); err == nil {
		t.Error("an unclosed block was accepted")
	}
}

func TestDocBlockKindRefused(t *testing.T) {
	for _, info := range []string{"bash", "console", "shell", "sh  run", "sh no-run", "text expected", "zsh"} {
		if _, err := (docBlock{file: "x.md", line: 1, info: info}).kind(); err == nil {
			t.Errorf("info string %q was accepted", info)
		}
	}
	for _, info := range []string{"text", "json", "yaml", "bat", "", "go"} {
		if _, err := (docBlock{file: "x.md", line: 1, info: info}).kind(); err != nil {
			t.Errorf("info string %q: %v", info, err)
		}
	}
}

func TestMatchExpected(t *testing.T) {
	got := "daemon pid 42, version 1.0\n\nAGENT  PID\nmaster 43   \nrc=3\n"
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"exact lines in order", "AGENT  PID\nrc=3\n", true},
		{"ellipsis", "daemon pid …, version …\nmaster …\n", true},
		{"blank lines ignored", "\n\nrc=3\n\n", true},
		{"out of order", "rc=3\nAGENT  PID\n", false},
		{"part of a line is not a line", "master\n", false},
		{"missing", "exit status 1\n", false},
		{"regexp characters are literal", "daemon pid .*\n", false},
		{"runs of spaces are equal", "AGENT PID\nmaster   43\n", true},
		{"a space is not nothing", "AGENTPID\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, ok := matchExpected(tc.want, got); ok != tc.ok {
				t.Errorf("matchExpected(%q) = %v, want %v", tc.want, ok, tc.ok)
			}
		})
	}
}

// FuzzParseDocBlocks: any text parses without a panic, and every block lies
// inside the text.
func FuzzParseDocBlocks(f *testing.F) {
	f.Add("```sh\necho hi\n```\n")
	f.Add("  ````text expect\n```\n````\n")
	f.Add("```\n")
	f.Fuzz(func(t *testing.T, text string) {
		blocks, _ := parseDocBlocks("f.md", text)
		n := strings.Count(text, "\n") + 1
		for _, b := range blocks {
			if b.line < 1 || b.line > n || len(b.body) > len(text)+n {
				t.Fatalf("block %+v outside a text of %d lines", b, n)
			}
			_, _ = b.kind()
		}
	})
}
