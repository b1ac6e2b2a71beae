package jobs

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"

	"go.etcd.io/bbolt"
)

// A large batch is written in parts as its body is read, not decoded whole
// and written in one transaction: held in memory at once, a 15 MB batch
// cost about 20 times its size (the body, its decoded items, their
// encodings, bbolt's dirty pages), and eight at once took a server past
// 1 GB. The bounds of one part:
const (
	streamChunkItems = 1_000
	streamChunkBytes = 1 << 20
)

// Submission is a batch job being written in parts: Add its items in
// order, then Commit (or Abort). Its items are in the file (under the
// staging bucket, which Open clears after a crash) but no job names them
// until Commit, so neither a client nor the runner sees a job half
// written. At most Config.StreamsMax are open at once. Not safe for
// concurrent use.
type Submission struct {
	s      *Store
	tenant string
	model  string
	id     string
	n      int
	// buf holds encoded items not yet written, bufBytes their size.
	buf      [][]byte
	bufBytes int
	staged   bool
	done     bool
	release  sync.Once
	// onCommit is told of the new job (the runner's intake).
	onCommit func(Job)
}

// Begin opens a submission of a batch job for tenant's model; the rest
// of sp (its inputs, version, idempotency key, body hash...) is given to
// Add and Commit. With StreamsMax submissions open, it is ErrBusy at once.
func (s *Store) Begin(sp Spec) (*Submission, error) {
	switch {
	case sp.Kind != KindBatch:
		return nil, fmt.Errorf("jobs: a submission in parts of kind %q: %w", sp.Kind, ErrInvalid)
	case !validKey(sp.Tenant) || !validKey(sp.Model):
		return nil, fmt.Errorf("jobs: tenant and model must be 1 to %d bytes of printable UTF-8: %w", keyMaxBytes, ErrInvalid)
	}
	select {
	case s.streams <- struct{}{}:
	default:
		return nil, fmt.Errorf("jobs: %d submissions being written: %w", s.cfg.StreamsMax, ErrBusy)
	}
	return &Submission{s: s, tenant: sp.Tenant, model: sp.Model, id: rand.Text()}, nil
}

// Add adds the next item; it is written once a part is full.
func (sub *Submission) Add(input string) error {
	s := sub.s
	switch {
	case sub.done:
		return errors.New("jobs: add to a finished submission")
	case sub.n >= s.cfg.ItemsMax:
		return fmt.Errorf("jobs: more than %d items: %w", s.cfg.ItemsMax, ErrTooManyItems)
	case len(input) > s.cfg.InputMaxBytes:
		return fmt.Errorf("jobs: item %d: %d bytes, over %d: %w", sub.n, len(input), s.cfg.InputMaxBytes, ErrInvalid)
	}
	v, err := encodeItem(sub.id, &Item{Index: sub.n, Status: Queued, Input: input})
	if err != nil {
		return err
	}
	sub.n++
	sub.buf = append(sub.buf, v)
	sub.bufBytes += len(v)
	if len(sub.buf) >= streamChunkItems || sub.bufBytes >= streamChunkBytes {
		return sub.flush()
	}
	return nil
}

// Len is the items added so far.
func (sub *Submission) Len() int { return sub.n }

// flush writes the items held, in a transaction of their own.
func (sub *Submission) flush() error {
	err := sub.s.guard(func() error {
		return sub.s.db.Update(func(tx *bbolt.Tx) error { return sub.write(tx) })
	})
	if err != nil {
		return err
	}
	sub.staged = true
	clear(sub.buf)
	sub.buf, sub.bufBytes = sub.buf[:0], 0
	return nil
}

// write puts the items held into tx.
func (sub *Submission) write(tx *bbolt.Tx) error {
	if len(sub.buf) == 0 {
		return nil
	}
	items := tx.Bucket(bucketItems).Bucket([]byte(sub.id))
	if items == nil {
		if err := tx.Bucket(bucketStaging).Put([]byte(sub.id), nil); err != nil {
			return err
		}
		var err error
		if items, err = tx.Bucket(bucketItems).CreateBucket([]byte(sub.id)); err != nil {
			return fmt.Errorf("jobs: items of %s: %w", sub.id, err)
		}
	}
	// Keys come in order: bbolt packs pages full on an append-only load.
	items.FillPercent = 1
	first := sub.n - len(sub.buf)
	for i, v := range sub.buf {
		if err := items.Put(u32(uint32(first+i)), v); err != nil {
			return err
		}
	}
	return nil
}

// drop deletes what was staged, in tx.
func (sub *Submission) drop(tx *bbolt.Tx) error {
	if err := tx.Bucket(bucketItems).DeleteBucket([]byte(sub.id)); err != nil && !errors.Is(err, bbolt.ErrBucketNotFound) {
		return fmt.Errorf("jobs: drop the staged items of %s: %w", sub.id, err)
	}
	return tx.Bucket(bucketStaging).Delete([]byte(sub.id))
}

func (sub *Submission) finish() {
	sub.done = true
	sub.buf = nil
	sub.release.Do(func() { <-sub.s.streams })
}

// Commit writes the last items and the job, synced, as Store.Submit does
// (sp's Kind, Tenant, Model and Inputs are the submission's, and ignored):
// it returns the job and whether it is new. A known idempotency key
// returns the original job (or ErrConflict), and the staged items go.
func (sub *Submission) Commit(sp Spec) (Job, bool, error) {
	s := sub.s
	if sub.done {
		return Job{}, false, errors.New("jobs: commit of a finished submission")
	}
	defer sub.finish()
	switch {
	case sub.n == 0:
		sub.abort()
		return Job{}, false, fmt.Errorf("jobs: 0 items, want 1 to %d: %w", s.cfg.ItemsMax, ErrTooManyItems)
	case sp.IdempotencyKey != "" && !validKey(sp.IdempotencyKey):
		sub.abort()
		return Job{}, false, fmt.Errorf("jobs: idempotency key must be 1 to %d bytes of printable UTF-8: %w", keyMaxBytes, ErrInvalid)
	case sp.Timeout < 0:
		sub.abort()
		return Job{}, false, fmt.Errorf("jobs: timeout %v: %w", sp.Timeout, ErrInvalid)
	}
	sp.Kind, sp.Tenant, sp.Model = KindBatch, sub.tenant, sub.model
	var out Job
	existing := false
	// refused is a refusal that still commits (the staged items' drop).
	var refused error
	err := s.guard(func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			out, existing, refused = Job{}, false, nil
			if sp.IdempotencyKey != "" {
				j, found, err := s.idempotent(tx, sp)
				if errors.Is(err, ErrConflict) || found {
					out, existing, refused = j, found, err
					return sub.drop(tx)
				} else if err != nil {
					return err
				}
			}
			if counter(tx, keyJobsHeld) >= s.cfg.JobsMax || counter(tx, keyItemsHeld)+sub.n > s.cfg.ItemsStoredMax {
				if _, err := s.sweep(tx, true); err != nil {
					return err
				}
			}
			if n, m := counter(tx, keyJobsHeld), counter(tx, keyItemsHeld); n >= s.cfg.JobsMax || m+sub.n > s.cfg.ItemsStoredMax {
				refused = fmt.Errorf("jobs: holding %d jobs (max %d) and %d items (max %d): %w", n, s.cfg.JobsMax, m, s.cfg.ItemsStoredMax, ErrFull)
				return sub.drop(tx)
			}
			if err := sub.write(tx); err != nil {
				return err
			}
			if err := tx.Bucket(bucketStaging).Delete([]byte(sub.id)); err != nil {
				return err
			}
			seq, err := tx.Bucket(bucketMeta).NextSequence()
			if err != nil {
				return err
			}
			created := s.now()
			j := Job{
				ID: sub.id, Kind: KindBatch, Tenant: sp.Tenant, Model: sp.Model, Version: sp.Version,
				Params: sp.Params, Priority: sp.Priority, Created: created,
				IdempotencyKey: sp.IdempotencyKey, BodyHash: sp.BodyHash, Seq: seq,
				Counts: Counts{Total: sub.n, Queued: sub.n},
			}
			if sp.Timeout > 0 {
				j.Deadline = created.Add(sp.Timeout)
			}
			if err := s.putJob(tx, &j); err != nil {
				return err
			}
			if err := tx.Bucket(bucketActive).Put(activeKey(&j), nil); err != nil {
				return err
			}
			if sp.IdempotencyKey != "" {
				if err := tx.Bucket(bucketIdem).Put(idemKey(sp.Tenant, sp.IdempotencyKey), []byte(j.ID)); err != nil {
					return err
				}
			}
			if err := addCounter(tx, keyJobsHeld, 1); err != nil {
				return err
			}
			out = j
			return addCounter(tx, keyItemsHeld, sub.n)
		})
	})
	if err != nil {
		sub.abort()
		return Job{}, false, err
	}
	if refused != nil {
		return Job{}, false, refused
	}
	if !existing && sub.onCommit != nil {
		sub.onCommit(out)
	}
	return out, !existing, nil
}

// Abort drops the submission and what it staged. Idempotent, and a no-op
// after Commit.
func (sub *Submission) Abort() {
	if sub.done {
		return
	}
	defer sub.finish()
	sub.abort()
}

func (sub *Submission) abort() {
	if !sub.staged {
		return
	}
	s := sub.s
	err := s.guard(func() error { return s.db.Update(sub.drop) })
	if err != nil {
		// Open drops it at the next start.
		s.log.Error("jobs: dropping a submission's staged items", "job", sub.id, "file", s.path, "err", err)
	}
}

// Begin opens a submission in parts (see Store.Begin); its Commit hands
// the job to the runner.
func (r *Runner) Begin(sp Spec) (*Submission, error) {
	sub, err := r.s.Begin(sp)
	if err != nil {
		return nil, err
	}
	sub.onCommit = func(j Job) {
		r.mu.Lock()
		r.incoming = append(r.incoming, j)
		r.mu.Unlock()
		r.signal()
	}
	return sub, nil
}
