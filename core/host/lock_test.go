package host

import (
	"errors"
	"testing"
)

func TestLockAgent(t *testing.T) {
	dir := t.TempDir()
	l, err := LockAgent(dir, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LockAgent(dir, "a1"); !errors.Is(err, ErrAgentRunning) {
		t.Fatalf("second lock = %v, want ErrAgentRunning", err)
	}
	other, err := LockAgent(dir, "a2")
	if err != nil {
		t.Fatalf("another agent: %v", err)
	}
	defer other.Unlock()
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	again, err := LockAgent(dir, "a1")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	again.Unlock()
}
