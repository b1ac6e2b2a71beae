package sim_test

import (
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/actorstest"
	"github.com/batchd/batchd/sim"
)

// TestConformance runs the runtime conformance suite against World.
func TestConformance(t *testing.T) {
	actorstest.Run(t, func(t *testing.T) actorstest.Runtime {
		return &simRuntime{w: sim.NewWorld(sim.DefaultWorldConfig(1))}
	})
}

// simRuntime is World as the suite sees it: virtual time, advanced by the
// suite's waits.
type simRuntime struct{ w *sim.World }

// awaitStep and awaitMax: Await advances the clock a millisecond at a time,
// up to ten virtual minutes, far past anything the suite waits for.
const (
	awaitStep = time.Millisecond
	awaitMax  = 10 * time.Minute
)

func (r *simRuntime) Spawn(addr actors.Address, newActor func() actors.Actor, exec actorstest.Executor) {
	if exec != nil {
		r.w.SetExecutor(addr, executor(exec))
	}
	r.w.Spawn(addr, newActor())
}

func (r *simRuntime) Inject(to actors.Address, msg actors.Message) { r.w.Inject(r.w.Now(), to, msg) }

func (r *simRuntime) Await(cond func() bool) bool {
	for end := r.w.Now() + awaitMax; r.w.Now() < end; {
		if cond() {
			return true
		}
		if err := r.w.RunUntil(r.w.Now() + awaitStep); err != nil {
			panic(err)
		}
	}
	return cond()
}

func (r *simRuntime) Sleep(d time.Duration) {
	if err := r.w.RunUntil(r.w.Now() + d); err != nil {
		panic(err)
	}
}

func (r *simRuntime) Supervised() bool { return false }

// Locker: the world runs every actor on the test's own goroutine.
func (r *simRuntime) Locker() actorstest.Locker { return noLock{} }

type noLock struct{}

func (noLock) Lock()   {}
func (noLock) Unlock() {}

// executor is an actorstest.Executor as a sim.Executor.
type executor actorstest.Executor

func (e executor) Run(now time.Duration, job actors.Job) (time.Duration, actors.JobDone, bool) {
	delay, hang := e(job.Inputs)
	if hang {
		return 0, actors.JobDone{}, true
	}
	return now + delay, actors.JobDone{ID: job.ID, Outputs: actorstest.Outputs(job.Model, job.Version, job.Inputs)}, false
}
