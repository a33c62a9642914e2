package main

import (
	"io"
	"testing"
)

// TestRootCmdFresh: every newRootCmd is a tree of its own (issue #31: no
// global root command): running one leaves the commands and the flags of
// the next one untouched, at their defaults.
func TestRootCmdFresh(t *testing.T) {
	a := newRootCmd()
	a.SetArgs([]string{"--log-level", "debug", "version", "--json"})
	a.SetOut(io.Discard)
	if err := a.Execute(); err != nil {
		t.Fatal(err)
	}
	b := newRootCmd()
	va, _, err := a.Find([]string{"version"})
	if err != nil {
		t.Fatal(err)
	}
	vb, _, err := b.Find([]string{"version"})
	if err != nil {
		t.Fatal(err)
	}
	if va == vb {
		t.Fatal("two trees share the version command")
	}
	if f := b.PersistentFlags().Lookup("log-level"); f.Changed || f.Value.String() != f.DefValue {
		t.Errorf("the new tree's --log-level is %q (set %v), want its default %q", f.Value, f.Changed, f.DefValue)
	}
	if f := vb.Flags().Lookup("json"); f.Changed || f.Value.String() != "false" {
		t.Errorf("the new tree's version --json is %q (set %v), want false", f.Value, f.Changed)
	}
}
