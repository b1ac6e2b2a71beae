package engine

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

func TestDoorWindow(t *testing.T) {
	d := newDoor(actors.DefaultBatcherConfig(), 1) // 100 per batch, 100 ms, SLO 200 ms
	if got := d.window(); got != 0 {
		t.Fatalf("window with no device: %d, want 0", got)
	}
	if c, why, _ := d.enter("a"); c != nil || why != actors.ReasonNoDevice {
		t.Fatalf("with no device: let in, or reason %v; want no_device", why)
	}
	d.publish(0, 4, 0)
	if got := d.window(); got != 1200 {
		t.Fatalf("window of 4 devices: %d, want 4 x 100 x (200+100)/100 = 1200", got)
	}
	d.publish(0, 4, 100*time.Millisecond) // batches run twice as long
	if got := d.window(); got != 4*100*(200+200)/200 {
		t.Fatalf("window with a 100 ms overrun: %d, want 800", got)
	}
}

// TestDoorWindowOfASplit: each accumulator of a split publishes its own
// overrun, and the window takes the largest, not the last published.
func TestDoorWindowOfASplit(t *testing.T) {
	d := newDoor(actors.DefaultBatcherConfig(), 2)
	d.publish(0, 4, 0)
	d.publish(1, 4, 100*time.Millisecond)
	d.publish(0, 4, 0) // the first accumulator again: nothing new
	if got := d.window(); got != 800 {
		t.Fatalf("window with one accumulator's 100 ms overrun: %d, want 800", got)
	}
	d.publish(1, 4, 0)
	if got := d.window(); got != 1200 {
		t.Fatalf("window once both learnt none: %d, want 1200", got)
	}
}

// TestDoorShares: one tenant's flood fills the window, and past it each
// tenant still gets an equal share, up to twice the window in all.
func TestDoorShares(t *testing.T) {
	cfg := actors.DefaultBatcherConfig()
	cfg.BatchMax = 10
	d := newDoor(cfg, 1)
	d.publish(0, 1, 0) // window 1 x 10 x 3 = 30
	var in []*atomic.Int64
	for i := range 30 {
		c, _, _ := d.enter("flood")
		if c == nil {
			t.Fatalf("request %d of the flood shut out inside the window", i)
		}
		in = append(in, c)
	}
	c, why, retry := d.enter("flood")
	if c != nil || why != actors.ReasonOverloaded || retry != 100*time.Millisecond {
		t.Fatalf("past the window: let in, or %v with retry %v; want overloaded after one batch time", why, retry)
	}
	// Two tenants in flight: the light one may hold up to 30/2.
	for i := range 15 {
		c, _, _ := d.enter("light")
		if c == nil {
			t.Fatalf("light request %d shut out below its share", i)
		}
		in = append(in, c)
	}
	if c, _, _ := d.enter("light"); c != nil {
		t.Fatal("light tenant let in past its share")
	}
	for _, c := range in {
		d.leave(c)
	}
	if d.total.Load() != 0 || d.active.Load() != 0 {
		t.Fatalf("after every leave: %d in, %d tenants active", d.total.Load(), d.active.Load())
	}
}
