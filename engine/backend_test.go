package engine

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/devicemodel"
)

func emulated(t *testing.T, mod func(*EmulatedConfig)) *Emulated {
	t.Helper()
	c := DefaultEmulatedConfig()
	c.Latency = actors.LatencyModel{}
	if mod != nil {
		mod(&c)
	}
	e, err := NewEmulated(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEmulatedOutputs(t *testing.T) {
	e := emulated(t, nil)
	inputs := []string{"a", "", "a longer input"}
	out, itemErrs, err := e.Run(context.Background(), "m", "v3", inputs)
	if err != nil || itemErrs != nil {
		t.Fatalf("Run: %v, %v", itemErrs, err)
	}
	for i, in := range inputs {
		if want := actors.EmulatedOutput("m", "v3", in); out[i] != want {
			t.Errorf("output %d = %q, want %q", i, out[i], want)
		}
	}
	if e.Batches() != 1 {
		t.Errorf("Batches = %d", e.Batches())
	}
}

func TestEmulatedBatchSize(t *testing.T) {
	e := emulated(t, nil)
	for _, n := range []int{0, 101} {
		_, _, err := e.Run(context.Background(), "m", "v", make([]string, n))
		if !errors.Is(err, ErrBatchSize) {
			t.Errorf("%d inputs: err %v, want ErrBatchSize", n, err)
		}
	}
	if _, _, err := e.Run(context.Background(), "m", "v", make([]string, 100)); err != nil {
		t.Errorf("100 inputs: %v", err)
	}
}

func TestEmulatedLatency(t *testing.T) {
	e := emulated(t, func(c *EmulatedConfig) { c.Latency = actors.FixedLatency(30 * time.Millisecond) })
	start := time.Now()
	if _, _, err := e.Run(context.Background(), "m", "v", []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 30*time.Millisecond {
		t.Errorf("batch took %v, before its latency", took)
	}
}

// TestEmulatedOneBatchAtATime: a second Run while one is in flight is two
// workers driving one device, and panics.
func TestEmulatedOneBatchAtATime(t *testing.T) {
	e := emulated(t, func(c *EmulatedConfig) { c.HangRate = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		e.Run(ctx, "m", "v", []string{"hangs"})
	}()
	for e.running.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("a second concurrent Run did not panic")
			}
		}()
		e.Run(context.Background(), "m", "v", []string{"second"})
	}()
	cancel()
	wg.Wait()
	// Once the first batch is over, the device takes the next one.
	ctx, cancel = context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, _, err := e.Run(ctx, "m", "v", []string{"after"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run after: %v", err)
	}
}

func TestEmulatedFaults(t *testing.T) {
	ctx := context.Background()
	in := []string{"a", "b"}
	t.Run("crash", func(t *testing.T) {
		e := emulated(t, func(c *EmulatedConfig) { c.CrashRate = 1 })
		if _, _, err := e.Run(ctx, "m", "v", in); !errors.Is(err, ErrDeviceFault) {
			t.Errorf("err %v, want ErrDeviceFault", err)
		}
	})
	t.Run("batch error", func(t *testing.T) {
		e := emulated(t, func(c *EmulatedConfig) { c.BatchErrorRate = 1 })
		_, _, err := e.Run(ctx, "m", "v", in)
		if !errors.Is(err, ErrBatch) || errors.Is(err, ErrDeviceFault) {
			t.Errorf("err %v, want ErrBatch and no fault", err)
		}
	})
	t.Run("poison", func(t *testing.T) {
		e := emulated(t, func(c *EmulatedConfig) { c.PoisonPrefix = "poison" })
		if _, _, err := e.Run(ctx, "m", "v", []string{"ok", "poison!"}); !errors.Is(err, ErrBatch) {
			t.Errorf("err %v, want ErrBatch", err)
		}
		if _, _, err := e.Run(ctx, "m", "v", []string{"ok"}); err != nil {
			t.Errorf("clean batch: %v", err)
		}
	})
	t.Run("item errors", func(t *testing.T) {
		e := emulated(t, func(c *EmulatedConfig) { c.ItemErrorRate = 1 })
		out, itemErrs, err := e.Run(ctx, "m", "v", in)
		if err != nil || len(itemErrs) != len(in) || len(out) != len(in) {
			t.Fatalf("got %q, %v, %v", out, itemErrs, err)
		}
		for i := range in {
			if !errors.Is(itemErrs[i], ErrItem) {
				t.Errorf("item %d: %v", i, itemErrs[i])
			}
		}
	})
	t.Run("hang until ctx done", func(t *testing.T) {
		e := emulated(t, func(c *EmulatedConfig) { c.HangRate = 1 })
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		if _, _, err := e.Run(ctx, "m", "v", in); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err %v, want DeadlineExceeded", err)
		}
	})
	t.Run("rates", func(t *testing.T) {
		e := emulated(t, func(c *EmulatedConfig) { c.ItemErrorRate = 0.25; c.Seed = 42 })
		failed, total := 0, 0
		for range 200 {
			_, itemErrs, err := e.Run(ctx, "m", "v", make([]string, 10))
			if err != nil {
				t.Fatal(err)
			}
			for _, ie := range itemErrs {
				if ie != nil {
					failed++
				}
			}
			total += 10
		}
		if frac := float64(failed) / float64(total); frac < 0.2 || frac > 0.3 {
			t.Errorf("item error fraction %v, want about 0.25", frac)
		}
	})
}

// TestEmulatedSeeded: the same seed gives the same faults.
func TestEmulatedSeeded(t *testing.T) {
	run := func() []bool {
		e := emulated(t, func(c *EmulatedConfig) { c.BatchErrorRate = 0.5; c.Seed = 7 })
		var fails []bool
		for range 50 {
			_, _, err := e.Run(context.Background(), "m", "v", []string{"x"})
			fails = append(fails, err != nil)
		}
		return fails
	}
	if a, b := run(), run(); !slices.Equal(a, b) {
		t.Error("same seed, different faults")
	}
}

func TestEmulatedConfigValidate(t *testing.T) {
	bad := []func(*EmulatedConfig){
		func(c *EmulatedConfig) { c.BatchMax = 0 },
		func(c *EmulatedConfig) { c.Latency.Base = -1 },
		func(c *EmulatedConfig) { c.HangRate = 1.5 },
		func(c *EmulatedConfig) { c.HangRate, c.CrashRate = 0.6, 0.6 },
		func(c *EmulatedConfig) { c.ItemErrorRate = -0.1 },
	}
	for i, mod := range bad {
		c := DefaultEmulatedConfig()
		mod(&c)
		if _, err := NewEmulated(c); err == nil {
			t.Errorf("case %d: no error", i)
		}
	}
}

// TestBoundedBackend: a call runs under a deadline of the multiple of its
// predicted latency, and a hang ends there.
func TestBoundedBackend(t *testing.T) {
	e := emulated(t, func(c *EmulatedConfig) { c.HangRate = 1 })
	b := boundedBackend{b: e, latency: actors.FixedLatency(2 * time.Millisecond), multiple: 10, floor: time.Millisecond}
	start := time.Now()
	_, _, err := b.Run(context.Background(), "m", "v", []string{"x"})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took < 20*time.Millisecond {
		t.Errorf("cut off after %v, before 10x the predicted 2ms", took)
	}
}

// TestEmulatedRunsTheDeviceModel: the live backend runs the simulator's
// device model, so the faults only the simulator had before (heal times,
// scheduled crashes and hangs, slow batches) run live too.
func TestEmulatedRunsTheDeviceModel(t *testing.T) {
	run := func(e *Emulated) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _, err := e.Run(ctx, "m", "v", []string{"x"})
		return err
	}
	t.Run("healed", func(t *testing.T) {
		// Every batch would crash, but the faults healed 1 ns after start.
		e := emulated(t, func(c *EmulatedConfig) { c.CrashRate, c.HealAt = 1, time.Nanosecond })
		if err := run(e); err != nil {
			t.Fatalf("a batch after HealAt: %v", err)
		}
	})
	t.Run("scheduled crash strikes once, on its device", func(t *testing.T) {
		sched := []devicemodel.ScheduledFault{{At: 0, Device: 1, Kind: devicemodel.FaultCrash}}
		other := emulated(t, func(c *EmulatedConfig) { c.Schedule, c.Index = sched, 0 })
		if err := run(other); err != nil {
			t.Fatalf("device 0 under device 1's crash: %v", err)
		}
		e := emulated(t, func(c *EmulatedConfig) { c.Schedule, c.Index = sched, 1 })
		if err := run(e); !errors.Is(err, ErrDeviceFault) {
			t.Fatalf("first batch: %v, want the scheduled crash", err)
		}
		if err := run(e); err != nil {
			t.Fatalf("second batch: %v, want the crash to have fired once", err)
		}
	})
	t.Run("scheduled hang", func(t *testing.T) {
		sched := []devicemodel.ScheduledFault{{At: 0, Device: 0, Kind: devicemodel.FaultHang}}
		e := emulated(t, func(c *EmulatedConfig) { c.Schedule = sched })
		if err := run(e); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung batch: %v, want it to block until its ctx ends", err)
		}
	})
	t.Run("invalid", func(t *testing.T) {
		for i, mod := range []func(*EmulatedConfig){
			func(c *EmulatedConfig) { c.SlowRate, c.SlowFactor = 0.5, 0.5 },
			func(c *EmulatedConfig) { c.HealAt = -time.Second },
			func(c *EmulatedConfig) { c.LatencySpread = 3 },
			func(c *EmulatedConfig) {
				c.Schedule = []devicemodel.ScheduledFault{{Kind: devicemodel.FaultSlow, Factor: 2}} // no For
			},
		} {
			c := DefaultEmulatedConfig()
			mod(&c)
			if _, err := NewEmulated(c); err == nil {
				t.Errorf("case %d: no error", i)
			}
		}
	})
}
