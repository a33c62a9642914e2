package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestLayoutPicture: docs/development.md shows docs/img/layout.svg, the
// rooms of the source and the direction of their imports; the SVG is
// docs/img/layout.dot rendered by Graphviz's dot (skipped without dot,
// except in CI, as TestArchitecturePicture), and the arrows of the .dot are
// the imports `go list` reports between the rooms: every package of the
// module is in a room, every import from one room into another is drawn,
// every arrow drawn has an import behind it, and no import is one the
// picture marks check=never. The header of layout.dot says how to read it.
func TestLayoutPicture(t *testing.T) {
	root := filepath.Join("..", "..")
	doc, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`!\[[^\]]+\]\(img/layout\.svg\)`).Match(doc) {
		t.Error("docs/development.md does not show img/layout.svg")
	}
	src := filepath.Join(root, "docs", "img", "layout.dot")
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	pic, err := parseLayout(raw)
	if err != nil {
		t.Fatalf("%s: %v", src, err)
	}

	t.Run("imports", func(t *testing.T) {
		out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../../...").Output()
		if err != nil {
			t.Fatal(err)
		}
		checkLayout(t, pic, string(out))
	})

	t.Run("render", func(t *testing.T) {
		dot, err := exec.LookPath("dot")
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal("dot (graphviz) is not installed; .ci/run installs it")
			}
			t.Skip("dot (graphviz) is not installed: apt-get install graphviz (CI has it)")
		}
		out, err := exec.Command(dot, "-Tsvg", src).Output()
		if err != nil {
			t.Fatalf("dot -Tsvg %s: %v", src, err)
		}
		have, err := os.ReadFile(filepath.Join(root, "docs", "img", "layout.svg"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(withoutVersion(out), withoutVersion(have)) {
			t.Fatal("docs/img/layout.svg is not docs/img/layout.dot rendered: run\n" +
				"  dot -Tsvg docs/img/layout.dot -o docs/img/layout.svg")
		}
	})
}

// layout is what TestLayoutPicture reads of docs/img/layout.dot: its rooms
// (node → the package patterns of its pkgs attribute) and its arrows
// (from → to → the check attribute: "", "never" or "until").
type layout struct {
	rooms  map[string][]string
	arrows map[[2]string]string
}

var (
	dotNode  = regexp.MustCompile(`^\s*(\w+)\s*\[(.*)\];\s*$`)
	dotArrow = regexp.MustCompile(`^\s*(\w+)\s*->\s*(\w+)\s*(?:\[(.*)\])?;\s*$`)
	dotAttr  = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|[^,\s\]]+)`)
)

// parseLayout reads the one-statement-a-line DOT of layout.dot: nodes with
// a pkgs attribute are rooms; every arrow must join two rooms.
func parseLayout(src []byte) (*layout, error) {
	l := &layout{rooms: map[string][]string{}, arrows: map[[2]string]string{}}
	var arrows [][3]string
	for i, line := range strings.Split(string(src), "\n") {
		if m := dotArrow.FindStringSubmatch(line); m != nil {
			check := attrs(m[3])["check"]
			if check != "" && check != "never" && check != "until" {
				return nil, fmt.Errorf("line %d: check=%s: want never or until", i+1, check)
			}
			arrows = append(arrows, [3]string{m[1], m[2], check})
			continue
		}
		if m := dotNode.FindStringSubmatch(line); m != nil && m[1] != "graph" && m[1] != "node" && m[1] != "edge" {
			pkgs := strings.Fields(attrs(m[2])["pkgs"])
			if len(pkgs) == 0 {
				return nil, fmt.Errorf("line %d: node %s has no pkgs attribute", i+1, m[1])
			}
			l.rooms[m[1]] = pkgs
		}
	}
	for _, a := range arrows {
		for _, n := range a[:2] {
			if _, ok := l.rooms[n]; !ok {
				return nil, fmt.Errorf("arrow %s -> %s: %s is not a room (a node with pkgs)", a[0], a[1], n)
			}
		}
		l.arrows[[2]string{a[0], a[1]}] = a[2]
	}
	if len(l.rooms) < 5 || len(l.arrows) < 5 {
		return nil, fmt.Errorf("read only %d rooms and %d arrows", len(l.rooms), len(l.arrows))
	}
	return l, nil
}

// attrs returns the attributes of a DOT attribute list, unquoted.
func attrs(list string) map[string]string {
	out := map[string]string{}
	for _, m := range dotAttr.FindAllStringSubmatch(list, -1) {
		out[m[1]] = strings.Trim(m[2], `"`)
	}
	return out
}

// room returns the room of import path p: the one with the longest pattern
// matching it, "" for none. A pattern whose first element has no dot is
// relative to the module; x/... matches x and what is under it.
func (l *layout) room(p string) string {
	const mod = "github.com/openstarry/openstarry-edge/"
	best, bestLen := "", 0
	for name, pats := range l.rooms {
		for _, pat := range pats {
			if first, _, _ := strings.Cut(pat, "/"); !strings.Contains(first, ".") {
				pat = mod + pat
			}
			base, tree := strings.CutSuffix(pat, "/...")
			if (p == base || tree && strings.HasPrefix(p, base+"/")) && len(base) > bestLen {
				best, bestLen = name, len(base)
			}
		}
	}
	return best
}

// checkLayout compares the picture with list, the output of `go list -f
// '{{.ImportPath}} {{join .Imports " "}}'` over the module.
func checkLayout(t *testing.T, l *layout, list string) {
	const mod = "github.com/openstarry/openstarry-edge"
	used := map[string]bool{}      // rooms with a package
	seen := map[[2]string]string{} // arrow → an import behind it
	lines := strings.Split(strings.TrimSpace(list), "\n")
	if len(lines) < 40 {
		t.Fatalf("go list listed %d packages:\n%s", len(lines), list)
	}
	for _, line := range lines {
		f := strings.Fields(line)
		from := l.room(f[0])
		if from == "" {
			t.Errorf("package %s is in no room of docs/img/layout.dot: add it to a room's pkgs", f[0])
			continue
		}
		used[from] = true
		for _, imp := range f[1:] {
			to := l.room(imp)
			if to == "" && (imp == mod || strings.HasPrefix(imp, mod+"/")) {
				t.Errorf("package %s (imported by %s) is in no room of docs/img/layout.dot", imp, f[0])
			}
			if to == "" || to == from {
				continue
			}
			used[to] = true
			a := [2]string{from, to}
			if _, ok := seen[a]; !ok {
				seen[a] = f[0] + " imports " + imp
			}
		}
	}
	for a, why := range seen {
		check, drawn := l.arrows[a]
		switch {
		case !drawn:
			t.Errorf("%s -> %s is not drawn (%s): draw it in docs/img/layout.dot if the import is meant, or take the import out", a[0], a[1], why)
		case check == "never":
			t.Errorf("%s -> %s must not exist (%s): the picture says never", a[0], a[1], why)
		}
	}
	var arrows [][2]string
	for a := range l.arrows {
		arrows = append(arrows, a)
	}
	slices.SortFunc(arrows, func(a, b [2]string) int { return strings.Compare(a[0]+" "+a[1], b[0]+" "+b[1]) })
	for _, a := range arrows {
		check := l.arrows[a]
		_, exists := seen[a]
		switch {
		case check == "never" || exists:
		case !used[a[0]] || !used[a[1]]:
			t.Logf("%s -> %s not checked: a room with no package yet", a[0], a[1])
		case check == "until":
			t.Logf("%s -> %s (check=until) no longer exists: take it out of docs/img/layout.dot", a[0], a[1])
		default:
			t.Errorf("%s -> %s is drawn but no package of %s imports one of %s: take it out of docs/img/layout.dot", a[0], a[1], a[0], a[1])
		}
	}
}
