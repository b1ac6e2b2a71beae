package enginetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/actorstest"
	"github.com/batchd/batchd/engine"
)

// Conformance runs the runtime conformance suite (actors/actorstest)
// against a live runtime adapter.
func Conformance(t *testing.T, newRuntime engine.NewRuntime) {
	actorstest.Run(t, func(t *testing.T) actorstest.Runtime {
		r, err := newRuntime(engine.RuntimeOptions{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := r.Close(ctx); err != nil {
				t.Errorf("close: %v", err)
			}
		})
		return &liveRuntime{t: t, r: r}
	})
}

// liveRuntime is an adapter as the suite sees it, in real time.
type liveRuntime struct {
	t *testing.T
	r engine.Runtime
}

// awaitMax is generous: a loaded two-core machine running the race
// detector is slow, and only a wait that never ends is a failure.
const awaitMax = 30 * time.Second

func (l *liveRuntime) Spawn(addr actors.Address, newActor func() actors.Actor, exec actorstest.Executor) {
	var b engine.Backend
	if exec != nil {
		b = backend{exec: exec}
	}
	if err := l.r.Spawn(addr, newActor, b); err != nil {
		l.t.Fatal(err)
	}
}

func (l *liveRuntime) Inject(to actors.Address, msg actors.Message) { l.r.Send(to, msg) }

func (l *liveRuntime) Await(cond func() bool) bool {
	for end := time.Now().Add(awaitMax); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func (l *liveRuntime) Sleep(d time.Duration) { time.Sleep(d) }

func (l *liveRuntime) Supervised() bool { return true }

func (l *liveRuntime) Locker() actorstest.Locker { return new(sync.Mutex) }

// backend adapts the suite's Executor to engine.Backend: it sleeps the
// delay, or blocks until ctx is done for a hang.
type backend struct{ exec actorstest.Executor }

func (b backend) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	delay, hang := b.exec(inputs)
	if hang {
		<-ctx.Done()
		return nil, nil, fmt.Errorf("enginetest: hung job abandoned: %w", ctx.Err())
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("enginetest: job abandoned: %w", ctx.Err())
		}
	}
	return actorstest.Outputs(model, version, inputs), nil, nil
}
