package sessionsql

import (
	"context"
	"testing"

	"github.com/openstarry/openstarry-edge/core/session"
	"github.com/openstarry/openstarry-edge/storage/sessiontest"
)

// TestConformance runs the session store suite on real SQLite files.
func TestConformance(t *testing.T) {
	sessiontest.Run(t, sessiontest.Harness{Open: func(t *testing.T, path string) session.Store {
		st, err := OpenStore(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}})
}

// TestRegistered: the store is the plugin sessionstore.sqlite.
func TestRegistered(t *testing.T) {
	open, err := session.LookupStore("sqlite")
	if err != nil {
		t.Fatal(err)
	}
	st, err := open(context.Background(), t.TempDir()+"/sessions.db")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, ok := st.(*Store); !ok {
		t.Fatalf("sessionstore.sqlite opened a %T", st)
	}
}
