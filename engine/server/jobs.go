package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/jobs"
)

// jobsStopMax bounds the wait for the job items in flight at a stop; the
// rest are withdrawn and stay queued (no attempt counted) for the next
// start.
const jobsStopMax = 2 * time.Second

// jobService is the node's durable job store and the runner that feeds it
// to the engine.
type jobService struct {
	store  *jobs.Store
	runner *jobs.Runner
	log    *slog.Logger
}

// openJobs opens the job store before anything else starts, so a damaged
// or locked file stops the start with an error naming it. It recovers the
// items a crash left running (see jobs.Open).
func openJobs(f *config.File, log *slog.Logger) (*jobService, error) {
	cfg, err := f.JobsConfig()
	if err != nil {
		return nil, err
	}
	cfg.Log = log
	s, err := jobs.Open(cfg, nil)
	if err != nil {
		return nil, fmt.Errorf("job store (jobs.dir, --data-dir): %w", err)
	}
	held, items, err := s.Held()
	if err != nil {
		return nil, fmt.Errorf("job store: %w", errors.Join(err, s.Close()))
	}
	log.Info("job store open", "file", s.Path(), "jobs", held, "items", items)
	return &jobService{store: s, log: log}, nil
}

// newRunner makes the runner, feeding eng, without starting it: the HTTP
// handler made with it then observes (counts in /metrics) every item the
// runner hands to the engine, the first ones included.
func (j *jobService) newRunner(eng engine.FrontDoor) *jobs.Runner {
	j.runner = jobs.NewRunner(j.store, eng, j.log)
	return j.runner
}

// start starts the runner newRunner made.
func (j *jobService) start() error {
	if err := j.runner.Start(); err != nil {
		return fmt.Errorf("job runner: %w", err)
	}
	return nil
}

// stop stops the runner (if started): items in flight get until ctx ends,
// and at most jobsStopMax, to finish and be written. Idempotent.
func (j *jobService) stop(ctx context.Context) error {
	if j.runner == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, jobsStopMax)
	defer cancel()
	return j.runner.Stop(ctx)
}

// close stops the runner if it still runs, then closes the store. Its
// failures are logged, not returned: every result was written or is
// queued again by then, and the next start recovers what is not.
func (j *jobService) close() {
	if err := j.stop(context.Background()); err != nil {
		j.log.Warn("job runner", "err", err)
	}
	if err := j.store.Close(); err != nil {
		j.log.Warn("job store", "err", err)
	}
}
