package wire

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOp(t *testing.T) {
	ctx := context.Background()
	if err := NewOp().Finish(nil).Wait(ctx, time.Second); err != nil {
		t.Errorf("acknowledged: %v", err)
	}
	lost := errors.New("lost")
	if err := NewOp().Finish(lost).Wait(ctx, time.Second); err != lost {
		t.Errorf("failed: %v, want %v", err, lost)
	}
	if err := NewOp().Wait(ctx, time.Millisecond); err == nil {
		t.Error("an operation never finished: no error after the limit")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := NewOp().Wait(cctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	o := NewOp()
	o.Filters = []string{"a", "b", "c"}
	o.Codes = []byte{1, 0x80}
	o.Finish(nil)
	got := o.Result()
	if len(got) != 2 || got["a"] != 1 || got["b"] != 0x80 {
		t.Errorf("Result %v, want a:1 b:128 (c has no code)", got)
	}
	select {
	case <-o.Done():
	default:
		t.Error("Done not closed after Finish")
	}
}
