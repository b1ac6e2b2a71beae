package jobs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// outcome is what the runner learned about one running item: a terminal
// state with its result, or Queued to run it again later.
type outcome struct {
	id    string
	index uint32
	next  Status
	// countAttempt: the run happened (a reply, of any outcome); false for
	// a run withdrawn before it could start (a load refusal, a stop).
	countAttempt bool
	output       string
	version      string
	err          *ItemError
	latency      time.Duration
	queue        time.Duration
	compute      time.Duration
	batchSize    int
}

// want asks a step for up to n queued items of one job: first the ones in
// retry (due now), then from index from on.
type want struct {
	id    string
	retry []uint32
	from  uint32
	n     int
}

// claim is an item the step moved to running: the runner hands it to the
// engine.
type claim struct {
	id       string
	index    uint32
	input    string
	attempts int
}

// stepResult is what a step did.
type stepResult struct {
	claims []claim
	// cursor is each wanted job's next index to look at; exhausted says
	// no queued item is left past it.
	cursor    map[string]uint32
	exhausted map[string]bool
	// closed lists the jobs that take no more claims: finished, cancelled
	// or gone.
	closed []string
	// stale counts outcomes for items no longer running (dropped).
	stale int
	// damaged lists the jobs found with a damaged record in this step
	// (logged by the store; their damaged items failed).
	damaged []string
}

// step writes outcomes and takes claims in one transaction: one fsync for
// a whole group of finished items and the next ones to run.
func (s *Store) step(outs []outcome, wants []want) (stepResult, error) {
	res := stepResult{cursor: map[string]uint32{}, exhausted: map[string]bool{}}
	err := s.guard(func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			res = stepResult{cursor: map[string]uint32{}, exhausted: map[string]bool{}}
			jobs := map[string]*Job{}
			var order []string
			load := func(id string) (*Job, error) {
				if j := jobs[id]; j != nil {
					return j, nil
				}
				j, err := s.job(tx, id)
				if err != nil {
					return nil, err
				}
				jobs[id] = &j
				order = append(order, id)
				return &j, nil
			}
			// A damaged job record closes that job alone: the others'
			// results are written and their items claimed as ever.
			broken := map[string]bool{}
			brokenJob := func(id string, err error) {
				if !broken[id] {
					broken[id] = true
					s.log.Error("jobs: damaged job record: the job is given up", "job", id, "file", s.path, "err", err)
					res.damaged = append(res.damaged, id)
				}
			}
			for _, o := range outs {
				j, err := load(o.id)
				if errors.Is(err, ErrNotFound) {
					res.stale++
					continue
				} else if errors.Is(err, ErrCorrupt) {
					brokenJob(o.id, err)
					res.stale++
					continue
				} else if err != nil {
					return err
				}
				if err := s.apply(tx, j, o, &res); err != nil {
					return err
				}
			}
			now := s.now()
			for _, w := range wants {
				j, err := load(w.id)
				if errors.Is(err, ErrNotFound) {
					res.closed = append(res.closed, w.id)
					continue
				} else if errors.Is(err, ErrCorrupt) {
					brokenJob(w.id, err)
					res.closed = append(res.closed, w.id)
					continue
				} else if err != nil {
					return err
				}
				if err := s.take(tx, j, w, now, &res); err != nil {
					return err
				}
			}
			for _, id := range order {
				if err := s.putJob(tx, jobs[id]); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return res, err
}

// apply writes one outcome. An item no longer running (its result already
// written by a run that was superseded) is left alone: a result is written
// once.
func (s *Store) apply(tx *bbolt.Tx, j *Job, o outcome, res *stepResult) error {
	items := tx.Bucket(bucketItems).Bucket([]byte(j.ID))
	if items == nil {
		s.log.Error("jobs: job has no items", "job", j.ID, "file", s.path)
		res.damaged = append(res.damaged, j.ID)
		res.stale++
		return nil
	}
	v := items.Get(u32(o.index))
	it, err := decodeItem(j.ID, o.index, v)
	if errors.Is(err, ErrCorrupt) {
		// Failed by repair: this run's result has nowhere to go.
		res.damaged = append(res.damaged, j.ID)
		res.stale++
		return s.repair(tx, j)
	} else if err != nil {
		return err
	}
	if it.Status != Running {
		res.stale++
		return nil
	}
	next := o.next
	if o.countAttempt {
		it.Attempts++
	}
	if next == Queued && j.CancelRequested {
		next = Cancelled
		it.Error = &ItemError{Code: "cancelled", Message: "the job was cancelled", HTTPStatus: 499}
	} else {
		it.Output, it.Version, it.Error = o.output, o.version, o.err
		it.Latency, it.Queue, it.Compute, it.BatchSize = o.latency, o.queue, o.compute, o.batchSize
	}
	return s.setItem(tx, j, &it, next)
}

// take claims up to w.n queued items of j. A job past its deadline has
// every queued item expired instead; a cancelled or finished job gives
// none.
func (s *Store) take(tx *bbolt.Tx, j *Job, w want, now time.Time, res *stepResult) error {
	if j.Done() || j.CancelRequested {
		res.closed = append(res.closed, j.ID)
		return nil
	}
	items := tx.Bucket(bucketItems).Bucket([]byte(j.ID))
	if items == nil {
		s.log.Error("jobs: job has no items: the job is given up", "job", j.ID, "file", s.path)
		res.damaged = append(res.damaged, j.ID)
		res.closed = append(res.closed, j.ID)
		return nil
	}
	late := !j.Deadline.IsZero() && !now.Before(j.Deadline)
	// Every record the scan passes is checked, not only the queued ones:
	// a damaged status byte would otherwise hide a queued item (the job
	// then never finishes) or make a finished one run again.
	damaged := false
	var picked []uint32
	for _, idx := range w.retry {
		v := items.Get(u32(idx))
		if checkItem(j.ID, idx, v) != nil {
			damaged = true
			continue
		}
		if v[0] == statusByte[Queued] {
			picked = append(picked, idx)
		}
	}
	n := w.n
	if late {
		n = j.Counts.Total // expire them all now
	}
	c := items.Cursor()
	k, v := c.Seek(u32(w.from))
	next := w.from
	for ; k != nil && len(picked) < n; k, v = c.Next() {
		if len(k) != 4 {
			return fmt.Errorf("jobs: job %s: item key %x: %w", j.ID, k, ErrCorrupt)
		}
		idx := binary.BigEndian.Uint32(k)
		next = idx + 1
		if checkItem(j.ID, idx, v) != nil {
			damaged = true
			continue
		}
		if v[0] == statusByte[Queued] {
			picked = append(picked, idx)
		}
	}
	res.cursor[j.ID] = next
	res.exhausted[j.ID] = k == nil
	for _, idx := range picked {
		it, err := decodeItem(j.ID, idx, items.Get(u32(idx)))
		if errors.Is(err, ErrCorrupt) {
			damaged = true // the JSON, under a right checksum: a bug's
			continue
		} else if err != nil {
			return err
		}
		if late {
			it.Error = &ItemError{Code: "deadline", Message: "the job's timeout passed before this item ran", HTTPStatus: 504}
			if err := s.setItem(tx, j, &it, Expired); err != nil {
				return err
			}
			continue
		}
		input := it.Input
		if err := s.setItem(tx, j, &it, Running); err != nil {
			return err
		}
		res.claims = append(res.claims, claim{id: j.ID, index: idx, input: input, attempts: it.Attempts})
	}
	if damaged {
		res.damaged = append(res.damaged, j.ID)
		if err := s.repair(tx, j); err != nil {
			return err
		}
	}
	if j.Done() {
		res.closed = append(res.closed, j.ID)
	}
	return nil
}

// active returns the unfinished jobs, oldest first, for the runner's
// start.
func (s *Store) active() ([]Job, error) {
	var out []Job
	err := s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			c := tx.Bucket(bucketActive).Cursor()
			for k, _ := c.First(); k != nil; k, _ = c.Next() {
				if len(k) <= 8 {
					return fmt.Errorf("jobs: %s: %w: active key %x", s.path, ErrCorrupt, k)
				}
				j, err := s.job(tx, string(k[8:]))
				if errors.Is(err, ErrCorrupt) {
					// Open moves such a job out of the active ones; one
					// damaged since is left for the next Open.
					s.log.Error("jobs: damaged job record: the job is given up", "job", string(k[8:]), "file", s.path, "err", err)
					continue
				} else if err != nil {
					return err
				}
				out = append(out, j)
			}
			return nil
		})
	})
	return out, err
}
