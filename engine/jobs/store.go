package jobs

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"
	"unicode"
	"unicode/utf8"

	"go.etcd.io/bbolt"
)

// Sentinel errors, for callers that branch on them (the HTTP adapter maps
// each to a status code).
var (
	// ErrNotFound: no such job, or another tenant's, or no longer kept.
	ErrNotFound = errors.New("no such job")
	// ErrConflict: the idempotency key was used before with another body.
	ErrConflict = errors.New("idempotency key reused with a different request")
	// ErrTooManyItems: a submission with no items or more than ItemsMax.
	ErrTooManyItems = errors.New("too many items")
	// ErrFull: the store holds JobsMax jobs or ItemsStoredMax items.
	ErrFull = errors.New("job store full")
	// ErrInvalid: a submission the store cannot key (bad idempotency key,
	// tenant or model name).
	ErrInvalid = errors.New("invalid job")
	// ErrCorrupt: the store file is damaged; Open names it.
	ErrCorrupt = errors.New("corrupt job store")
	// ErrClosed: the store is closed.
	ErrClosed = errors.New("job store closed")
	// ErrFormat: the store file was written in a layout this batchd does
	// not read (an older one's); Open names it.
	ErrFormat = errors.New("job store format")
	// ErrBusy: StreamsMax submissions are being written in parts already.
	ErrBusy = errors.New("too many large submissions at once")
)

// Status is a job's or an item's state.
type Status string

// The states, as GET /v1/requests/{id} reports them.
const (
	Queued    Status = "queued"
	Running   Status = "running"
	Completed Status = "completed"
	Failed    Status = "failed"
	Cancelled Status = "cancelled"
	Expired   Status = "expired"
)

// Terminal reports whether s is a final state.
func (s Status) Terminal() bool {
	return s == Completed || s == Failed || s == Cancelled || s == Expired
}

// statusByte is an item's status as the first byte of its record, so a
// scan for queued items need not decode the rest.
var statusByte = map[Status]byte{Queued: 'q', Running: 'r', Completed: 'c', Failed: 'f', Cancelled: 'x', Expired: 'e'}

func statusOf(b byte) (Status, bool) {
	switch b {
	case 'q':
		return Queued, true
	case 'r':
		return Running, true
	case 'c':
		return Completed, true
	case 'f':
		return Failed, true
	case 'x':
		return Cancelled, true
	case 'e':
		return Expired, true
	}
	return "", false
}

// Kinds of job.
const (
	// KindInfer is one async infer: a job of one item, whose status is
	// its item's.
	KindInfer = "infer"
	// KindBatch is a batch of items.
	KindBatch = "batch"
)

// Spec is a submission.
type Spec struct {
	Kind     string
	Tenant   string
	Model    string
	Version  string
	Params   string
	Priority int8
	// Timeout, when positive, is the job's deadline from its creation:
	// items not finished by then expire.
	Timeout time.Duration
	// IdempotencyKey, when not empty, makes a resubmission with the same
	// key and BodyHash return the original job (per tenant).
	IdempotencyKey string
	// BodyHash identifies the request (a hash of its canonical form), to
	// tell a retry of it from another request with the same key.
	BodyHash string
	Inputs   []string
}

// Counts are a job's items by state.
type Counts struct {
	Total     int `json:"total"`
	Queued    int `json:"queued"`
	Running   int `json:"running"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	Expired   int `json:"expired"`
}

// finished is the number of items in a terminal state.
func (c Counts) finished() int { return c.Completed + c.Failed + c.Cancelled + c.Expired }

func (c Counts) check() error {
	if c.Queued < 0 || c.Running < 0 || c.Queued+c.Running+c.finished() != c.Total {
		return fmt.Errorf("jobs: counts do not add up: %+v", c)
	}
	return nil
}

func (c *Counts) add(s Status, d int) {
	switch s {
	case Queued:
		c.Queued += d
	case Running:
		c.Running += d
	case Completed:
		c.Completed += d
	case Failed:
		c.Failed += d
	case Cancelled:
		c.Cancelled += d
	case Expired:
		c.Expired += d
	}
}

// Job is a job's record.
type Job struct {
	ID       string `json:"id"`
	Kind     string `json:"kind"`
	Tenant   string `json:"tenant"`
	Model    string `json:"model"`
	Version  string `json:"version,omitempty"`
	Params   string `json:"params,omitempty"`
	Priority int8   `json:"priority,omitempty"`
	// Created, Deadline and Finished are wall-clock times: they must mean
	// the same after a restart.
	Created  time.Time `json:"created"`
	Deadline time.Time `json:"deadline,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// CancelRequested is set by Cancel.
	CancelRequested bool   `json:"cancel_requested,omitempty"`
	IdempotencyKey  string `json:"idempotency_key,omitempty"`
	BodyHash        string `json:"body_hash,omitempty"`
	// Seq orders jobs by submission.
	Seq    uint64 `json:"seq"`
	Counts Counts `json:"counts"`
	// Result is an infer job's final status (its item's).
	Result Status `json:"result,omitempty"`
}

// Done reports whether every item is in a terminal state.
func (j *Job) Done() bool { return j.Counts.finished() == j.Counts.Total }

// Status is the job's state: for an infer job, its item's once finished;
// for a batch, cancelled once Cancel was asked, completed once every item
// is finished (each item says how), expired or failed when every item
// did; before that running once any item started, else queued.
func (j *Job) Status() Status {
	c := j.Counts
	switch {
	case j.Kind == KindInfer && j.Done() && j.Result != "":
		return j.Result
	case j.CancelRequested:
		return Cancelled
	case j.Done() && c.Expired == c.Total:
		return Expired
	case j.Done() && c.Failed == c.Total:
		return Failed
	case j.Done():
		return Completed
	case c.Queued == c.Total:
		return Queued
	}
	return Running
}

// ItemError is why an item did not complete: a stable code (the engine's
// reason, or the runner's own), a message, and the HTTP status the item
// would have had as a synchronous request.
type ItemError struct {
	Code       string `json:"code"`
	Message    string `json:"message"`
	HTTPStatus int    `json:"http_status"`
}

// Item is one input of a job and its fate.
type Item struct {
	Index    int        `json:"-"`
	Status   Status     `json:"-"`
	Input    string     `json:"in"`
	Attempts int        `json:"at,omitempty"`
	Output   string     `json:"out,omitempty"`
	Version  string     `json:"v,omitempty"`
	Error    *ItemError `json:"err,omitempty"`
	// Latency is from the run's arrival in the engine to its reply; Queue
	// and Compute split it (completed items).
	Latency   time.Duration `json:"lat,omitempty"`
	Queue     time.Duration `json:"q,omitempty"`
	Compute   time.Duration `json:"c,omitempty"`
	BatchSize int           `json:"bs,omitempty"`
}

// Records carry a CRC-32C (Castagnoli) over their key and their bytes: a
// byte changed on disk (bbolt checks its pages' structure, not their
// contents) is found when the record is read, instead of being served as
// if it were what was written. The key is in the sum so that a record
// moved to another key fails too.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcBytes is the size of a record's checksum.
const crcBytes = 4

// encodeItem is an item's record: its status byte (so a scan for queued
// items need not decode the rest), the CRC-32C of key and record, then the
// item as JSON.
func encodeItem(id string, it *Item) ([]byte, error) {
	b, err := json.Marshal(it)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode item: %w", err)
	}
	sb, ok := statusByte[it.Status]
	if !ok {
		return nil, fmt.Errorf("jobs: item status %q", it.Status)
	}
	v := make([]byte, 1+crcBytes+len(b))
	v[0] = sb
	copy(v[1+crcBytes:], b)
	binary.BigEndian.PutUint32(v[1:], itemSumOf(id, uint32(it.Index), v))
	return v, nil
}

// itemSumOf is the checksum of record v, leaving its checksum field out.
func itemSumOf(id string, idx uint32, v []byte) uint32 {
	sum := crc32.Update(0, castagnoli, []byte(id))
	sum = crc32.Update(sum, castagnoli, u32(idx))
	sum = crc32.Update(sum, castagnoli, v[:1])
	return crc32.Update(sum, castagnoli, v[1+crcBytes:])
}

// checkItem reports whether record v of job id's item idx is whole: long
// enough, a known status, its checksum right.
func checkItem(id string, idx uint32, v []byte) error {
	if len(v) < 1+crcBytes+2 {
		return fmt.Errorf("jobs: job %s item %d: %d-byte record: %w", id, idx, len(v), ErrCorrupt)
	}
	if _, ok := statusOf(v[0]); !ok {
		return fmt.Errorf("jobs: job %s item %d: status byte %q: %w", id, idx, v[0], ErrCorrupt)
	}
	if got, want := itemSumOf(id, idx, v), binary.BigEndian.Uint32(v[1:]); got != want {
		return fmt.Errorf("jobs: job %s item %d: checksum %08x, record says %08x: %w", id, idx, got, want, ErrCorrupt)
	}
	return nil
}

func decodeItem(id string, idx uint32, v []byte) (Item, error) {
	var it Item
	if err := checkItem(id, idx, v); err != nil {
		return it, err
	}
	if err := json.Unmarshal(v[1+crcBytes:], &it); err != nil {
		return it, fmt.Errorf("jobs: job %s item %d: %w: %w", id, idx, ErrCorrupt, err)
	}
	st, _ := statusOf(v[0])
	it.Index, it.Status = int(idx), st
	return it, nil
}

// encodeJob is a job's record: the CRC-32C of its id and JSON, then the
// JSON.
func encodeJob(j *Job) ([]byte, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("jobs: encode job: %w", err)
	}
	v := make([]byte, crcBytes+len(b))
	copy(v[crcBytes:], b)
	binary.BigEndian.PutUint32(v, jobSum(j.ID, b))
	return v, nil
}

func jobSum(id string, b []byte) uint32 {
	return crc32.Update(crc32.Update(0, castagnoli, []byte(id)), castagnoli, b)
}

func decodeJob(id string, v []byte) (Job, error) {
	var j Job
	if len(v) < crcBytes+2 {
		return j, fmt.Errorf("jobs: job %s: %d-byte record: %w", id, len(v), ErrCorrupt)
	}
	if got, want := jobSum(id, v[crcBytes:]), binary.BigEndian.Uint32(v); got != want {
		return j, fmt.Errorf("jobs: job %s: checksum %08x, record says %08x: %w", id, got, want, ErrCorrupt)
	}
	if err := json.Unmarshal(v[crcBytes:], &j); err != nil {
		return j, fmt.Errorf("jobs: job %s: %w: %w", id, ErrCorrupt, err)
	}
	if j.ID != id {
		return j, fmt.Errorf("jobs: job %s: record names %q: %w", id, j.ID, ErrCorrupt)
	}
	return j, nil
}

// Config configures a Store and its Runner. Start from DefaultConfig.
type Config struct {
	// Path is the store file. Its directory is created if missing.
	Path string
	// ItemsMax bounds the items of one job. Default 10,000.
	ItemsMax int
	// JobsMax bounds the jobs held, finished or not. A submission at the
	// bound (or at ItemsStoredMax) first drops the oldest finished job,
	// retention or not; with none to drop it is refused (ErrFull).
	// Default 10,000.
	JobsMax int
	// ItemsStoredMax bounds the items held in all jobs. Default 1,000,000.
	ItemsStoredMax int
	// InputMaxBytes bounds one input, as a backstop to the HTTP limits.
	// Default 64 KiB.
	InputMaxBytes int
	// RetainAge is how long a finished job's results are kept; RetainMax
	// bounds how many finished jobs are kept (the oldest go first).
	// Defaults 1 h and 10,000.
	RetainAge time.Duration
	RetainMax int
	// SweepEvery is the period of the retention sweep. Default 30 s.
	SweepEvery time.Duration
	// OpenTimeout bounds the wait for the file's lock (another batchd
	// holding it). Default 2 s.
	OpenTimeout time.Duration
	// AttemptMax bounds the runs of an item interrupted by a server stop
	// or crash: an item found running at Open after this many fails.
	// Default 3.
	AttemptMax int
	// WindowJob and WindowTotal bound the items handed to the engine at
	// once, per job and over all jobs (items waiting to retry included).
	// Defaults 128 and 256: more than a full batch of 100, so a job can
	// fill batches, and few enough that it cannot flood the queues.
	WindowJob   int
	WindowTotal int
	// FlushItems and FlushEvery: finished items are written in one
	// transaction once FlushItems are waiting or the oldest has waited
	// FlushEvery. Defaults 512 and 5 ms.
	FlushItems int
	FlushEvery time.Duration
	// RetryMax bounds the times one item is retried in one process after a
	// load refusal or a missed SLO; then it fails with the last error.
	// RetryBackoffMin and RetryBackoffMax bound the wait before a retry
	// (the engine's Retry-After hint when it gives one, else doubling).
	// Defaults 200, 20 ms and 2 s.
	RetryMax        int
	RetryBackoffMin time.Duration
	RetryBackoffMax time.Duration
	// StreamsMax bounds the submissions written in parts (Begin) at once;
	// one more is refused at once (ErrBusy) rather than queued, so that a
	// burst of large batches cannot pile up memory or the store's writer.
	// Default 4.
	StreamsMax int
	// Log is where the store reports the records it finds damaged; nil
	// discards.
	Log *slog.Logger
}

// DefaultConfig returns the defaults, with path as the file.
func DefaultConfig(path string) Config {
	return Config{
		Path:            path,
		ItemsMax:        10_000,
		JobsMax:         10_000,
		ItemsStoredMax:  1_000_000,
		InputMaxBytes:   64 << 10,
		RetainAge:       time.Hour,
		RetainMax:       10_000,
		SweepEvery:      30 * time.Second,
		OpenTimeout:     2 * time.Second,
		AttemptMax:      3,
		WindowJob:       128,
		WindowTotal:     256,
		FlushItems:      512,
		FlushEvery:      5 * time.Millisecond,
		RetryMax:        200,
		RetryBackoffMin: 20 * time.Millisecond,
		RetryBackoffMax: 2 * time.Second,
		StreamsMax:      4,
	}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.Path == "":
		return errors.New("jobs config: Path: empty")
	case c.ItemsMax < 1 || c.JobsMax < 1 || c.ItemsStoredMax < c.ItemsMax || c.InputMaxBytes < 1:
		return fmt.Errorf("jobs config: ItemsMax %d, JobsMax %d, ItemsStoredMax %d, InputMaxBytes %d: must be positive, ItemsStoredMax at least ItemsMax",
			c.ItemsMax, c.JobsMax, c.ItemsStoredMax, c.InputMaxBytes)
	case c.RetainAge <= 0 || c.RetainMax < 1 || c.SweepEvery <= 0 || c.OpenTimeout <= 0:
		return errors.New("jobs config: RetainAge, RetainMax, SweepEvery and OpenTimeout must be positive")
	case c.AttemptMax < 1 || c.RetryMax < 0:
		return fmt.Errorf("jobs config: AttemptMax %d, RetryMax %d: want AttemptMax >= 1, RetryMax >= 0", c.AttemptMax, c.RetryMax)
	case c.WindowJob < 1 || c.WindowTotal < c.WindowJob:
		return fmt.Errorf("jobs config: WindowJob %d, WindowTotal %d: want 1 <= WindowJob <= WindowTotal", c.WindowJob, c.WindowTotal)
	case c.FlushItems < 1 || c.FlushEvery <= 0:
		return errors.New("jobs config: FlushItems and FlushEvery must be positive")
	case c.RetryBackoffMin <= 0 || c.RetryBackoffMax < c.RetryBackoffMin:
		return errors.New("jobs config: want 0 < RetryBackoffMin <= RetryBackoffMax")
	case c.StreamsMax < 1:
		return fmt.Errorf("jobs config: StreamsMax %d: must be positive", c.StreamsMax)
	}
	return nil
}

// Bucket and meta key names.
var (
	bucketMeta   = []byte("meta")
	bucketJobs   = []byte("jobs")
	bucketItems  = []byte("items")
	bucketIdem   = []byte("idem")
	bucketActive = []byte("active")
	bucketDone   = []byte("done")
	// bucketStaging lists the submissions being written in parts (id to
	// nothing): their items are in bucketItems, but no job record names
	// them yet. Open drops what a crash left there.
	bucketStaging = []byte("staging")

	keyFormat    = []byte("format")
	keyJobsHeld  = []byte("jobs_held")
	keyItemsHeld = []byte("items_held")
)

// formatVersion is the layout this code writes; a file of another is
// refused at Open rather than misread. Format 2 added the records'
// checksums (format 1 had none).
const formatVersion = 2

// submitBatchDelay is the longest a submission waits to share a commit.
const submitBatchDelay = 2 * time.Millisecond

// keyMaxBytes bounds an idempotency key.
const keyMaxBytes = 256

// Store is the durable job store. Its methods are safe for concurrent use.
type Store struct {
	db   *bbolt.DB
	cfg  Config
	path string
	log  *slog.Logger
	// streams holds a token per submission being written in parts
	// (StreamsMax).
	streams chan struct{}
	// now is the wall clock (injected by tests): retention and deadlines
	// must survive a restart, which the engine's clock does not.
	now func() time.Time
}

// Open opens (or creates) the store at cfg.Path, checks the file, and
// recovers from a crash: every item left running is queued again with one
// attempt counted, or failed past AttemptMax. now is the wall clock; nil
// is time.Now. A damaged file is an error naming it and wrapping
// ErrCorrupt; the file is left as it is, for a person to look at.
func Open(cfg Config, now func() time.Time) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("jobs: store directory: %w", err)
		}
	}
	// bbolt makes a new store of an empty file; but batchd's store is
	// never empty once created, so an empty file is one truncated (a
	// copy cut short, a full disk): its jobs would be lost in silence.
	if fi, err := os.Stat(cfg.Path); err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
		return nil, fmt.Errorf("jobs: open %s: %w: the file is empty (0 bytes), not a job store; move it away to start with an empty store", cfg.Path, ErrCorrupt)
	}
	db, err := openDB(cfg.Path, cfg.OpenTimeout)
	if err != nil {
		return nil, err
	}
	// A submission waits at most this long for others to share its
	// commit (bbolt's default is 10 ms).
	db.MaxBatchDelay = submitBatchDelay
	s := &Store{db: db, cfg: cfg, path: cfg.Path, log: log, now: now, streams: make(chan struct{}, cfg.StreamsMax)}
	if err := s.guard(s.check); err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := s.guard(s.init); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// openDB is bbolt.Open with its panics (some corruptions make it index
// out of a page) and its faults (see guard) turned into an error naming
// the file.
func openDB(path string, timeout time.Duration) (db *bbolt.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("jobs: open %s: %w: %v", path, ErrCorrupt, r)
		}
	}()
	db, err = bbolt.Open(path, 0o600, &bbolt.Options{Timeout: timeout})
	if err == nil {
		return db, nil
	}
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("jobs: open %s: locked by another process (is another batchd using it?): %w", path, err)
	}
	var pe *os.PathError
	if errors.As(err, &pe) && !errors.Is(err, os.ErrInvalid) {
		return nil, fmt.Errorf("jobs: open %s: %w", path, err)
	}
	return nil, fmt.Errorf("jobs: open %s: %w: %w", path, ErrCorrupt, err)
}

// guard runs fn, turning a panic (bbolt on a damaged page) into an error
// naming the file. bbolt reads its pages in a memory map of the file and
// follows page numbers unchecked: one that points past the map faults,
// which kills the process unless the goroutine that reads is set to
// panic on faults, as fn's is here.
func (s *Store) guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("jobs: %s: %w: %v", s.path, ErrCorrupt, r)
		}
	}()
	return fn()
}

// checkErrorsMax bounds the consistency errors quoted at Open.
const checkErrorsMax = 3

// check walks the whole file: a damaged page is found at start, not later
// in the middle of a job. First every bucket's keys, on this goroutine
// (run under guard, where a page number that points out of the file
// faults into an error), then bbolt's consistency check, which runs on a
// goroutine of its own, where such a fault would kill the process.
func (s *Store) check() error {
	return s.db.View(func(tx *bbolt.Tx) error {
		if err := tx.ForEach(func(_ []byte, b *bbolt.Bucket) error { return walkBucket(b, 1) }); err != nil {
			return fmt.Errorf("jobs: %s: %w: %w", s.path, ErrCorrupt, err)
		}
		var errs []error
		for err := range tx.Check() {
			if len(errs) < checkErrorsMax {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			return fmt.Errorf("jobs: %s: %w: %w", s.path, ErrCorrupt, errors.Join(errs...))
		}
		return nil
	})
}

// bucketDepthMax bounds the nesting of buckets walkBucket follows: the
// store nests one level (a bucket of items per job under items), so a
// bucket this deep is damage, and the walk of a damaged file stays
// bounded.
const bucketDepthMax = 8

// walkBucket reads every key of b and of the buckets in it, depth deep
// (1 for a top-level bucket): every page of its tree.
func walkBucket(b *bbolt.Bucket, depth int) error {
	if depth > bucketDepthMax {
		return fmt.Errorf("buckets nested %d deep", depth)
	}
	return b.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		if child := b.Bucket(k); child != nil {
			return walkBucket(child, depth+1)
		}
		return nil
	})
}

// init creates the buckets of a new file, checks the format of an old one,
// and recovers the items left running.
func (s *Store) init() error {
	return s.db.Update(func(tx *bbolt.Tx) error {
		for _, name := range [][]byte{bucketMeta, bucketJobs, bucketItems, bucketIdem, bucketActive, bucketDone, bucketStaging} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("jobs: %s: %w: bucket %s: %w", s.path, ErrCorrupt, name, err)
			}
		}
		meta := tx.Bucket(bucketMeta)
		switch v := meta.Get(keyFormat); {
		case v == nil:
			if err := meta.Put(keyFormat, u64(formatVersion)); err != nil {
				return err
			}
		case len(v) == 8 && binary.BigEndian.Uint64(v) < formatVersion:
			return fmt.Errorf("jobs: %s: %w %d, written by an older batchd (this one reads format %d): let that version finish its jobs, or move the file away", s.path, ErrFormat, binary.BigEndian.Uint64(v), formatVersion)
		case len(v) != 8 || binary.BigEndian.Uint64(v) != formatVersion:
			return fmt.Errorf("jobs: %s: %w: format %x, this batchd reads %d", s.path, ErrCorrupt, v, formatVersion)
		}
		if err := s.dropStaged(tx); err != nil {
			return err
		}
		return s.recover(tx)
	})
}

// recover queues again every item of an unfinished job that was running
// when the last process stopped, counting the attempt it spent; one past
// AttemptMax fails. A job whose record is damaged is logged and moved to
// the finished ones (retention drops it); an item whose record is damaged
// fails (see repair): neither stops the start or the other jobs.
func (s *Store) recover(tx *bbolt.Tx) error {
	var keys [][]byte
	c := tx.Bucket(bucketActive).Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		if len(k) <= 8 {
			return fmt.Errorf("jobs: %s: %w: active key %x", s.path, ErrCorrupt, k)
		}
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		id := string(k[8:])
		j, err := s.job(tx, id)
		if errors.Is(err, ErrCorrupt) {
			s.log.Error("jobs: damaged job record: the job is given up", "job", id, "file", s.path, "err", err)
			if err := tx.Bucket(bucketActive).Delete(k); err != nil {
				return err
			}
			if err := tx.Bucket(bucketDone).Put(append(u64(uint64(s.now().UnixNano())), id...), nil); err != nil {
				return err
			}
			continue
		} else if err != nil {
			return err
		}
		if j.Counts.Running == 0 {
			continue
		}
		items := tx.Bucket(bucketItems).Bucket([]byte(id))
		if items == nil {
			return fmt.Errorf("jobs: %s: %w: job %s has no items", s.path, ErrCorrupt, id)
		}
		var running []Item
		damaged := false
		ic := items.Cursor()
		for k, v := ic.First(); k != nil; k, v = ic.Next() {
			if len(v) > 0 && v[0] == statusByte[Running] {
				it, err := decodeItem(id, binary.BigEndian.Uint32(k), v)
				if err != nil {
					damaged = true
					break
				}
				running = append(running, it)
			}
		}
		if damaged || len(running) != j.Counts.Running {
			// Fail the damaged records, count the job again from what
			// is left, and look again.
			if err := s.repair(tx, &j); err != nil {
				return err
			}
			running = running[:0]
			for k, v := ic.First(); k != nil; k, v = ic.Next() {
				if len(v) > 0 && v[0] == statusByte[Running] {
					it, err := decodeItem(id, binary.BigEndian.Uint32(k), v)
					if err != nil {
						return err // repair left none: a bug
					}
					running = append(running, it)
				}
			}
		}
		for i := range running {
			it := &running[i]
			it.Attempts++
			next := Queued
			if it.Attempts >= s.cfg.AttemptMax {
				next = Failed
				it.Error = &ItemError{Code: "attempts", HTTPStatus: 500,
					Message: fmt.Sprintf("the server stopped %d times while this item ran", it.Attempts)}
			}
			if err := s.setItem(tx, &j, it, next); err != nil {
				return err
			}
		}
		if err := s.putJob(tx, &j); err != nil {
			return err
		}
	}
	return nil
}

// codeCorrupt is the error code of an item whose stored record was found
// damaged.
const codeCorrupt = "corrupt"

// corruptItem is what a damaged item record is replaced with: failed, its
// input and any result lost.
func corruptItem(idx uint32, cause error) Item {
	return Item{Index: int(idx), Status: Failed, Error: &ItemError{Code: codeCorrupt, HTTPStatus: 500,
		Message: "the stored record of this item was damaged (" + cause.Error() + "); its input and result are lost"}}
}

// repairItemsMax bounds the damaged records repair logs one by one.
const repairItemsMax = 10

// repair fails every damaged item record of j (wrong checksum, unknown
// status, bad JSON), logging each at error level with the job's id, then
// counts j's items again from their records, moving j to the finished
// jobs if none is left to run. The caller writes j. One damaged record
// costs its item, never the other items or jobs: an error here is the
// store failing to write, not the record.
func (s *Store) repair(tx *bbolt.Tx, j *Job) error {
	items := tx.Bucket(bucketItems).Bucket([]byte(j.ID))
	if items == nil {
		return fmt.Errorf("jobs: job %s has no items: %w", j.ID, ErrCorrupt)
	}
	type bad struct {
		idx   uint32
		cause error
	}
	var damaged []bad
	var counts Counts
	c := items.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if len(k) != 4 {
			return fmt.Errorf("jobs: job %s: item key %x: %w", j.ID, k, ErrCorrupt)
		}
		idx := binary.BigEndian.Uint32(k)
		if _, err := decodeItem(j.ID, idx, v); err != nil {
			damaged = append(damaged, bad{idx, err})
			counts.add(Failed, 1)
			continue
		}
		st, _ := statusOf(v[0])
		counts.add(st, 1)
	}
	counts.Total = counts.Queued + counts.Running + counts.finished()
	for i, d := range damaged {
		if i < repairItemsMax {
			s.log.Error("jobs: damaged item record: the item fails", "job", j.ID, "item", d.idx, "file", s.path, "err", d.cause)
		}
		it := corruptItem(d.idx, d.cause)
		v, err := encodeItem(j.ID, &it)
		if err != nil {
			return err
		}
		if err := items.Put(u32(d.idx), v); err != nil {
			return err
		}
	}
	if len(damaged) > repairItemsMax {
		s.log.Error("jobs: more damaged item records", "job", j.ID, "count", len(damaged)-repairItemsMax)
	}
	if counts.Total != j.Counts.Total {
		// Records missing (or more than submitted): the job's own total
		// is what the client was told; the gap fails.
		s.log.Error("jobs: job's items do not match its total", "job", j.ID, "total", j.Counts.Total, "held", counts.Total)
		counts.Failed += j.Counts.Total - counts.Total
		counts.Total = j.Counts.Total
		if counts.Failed < 0 {
			return fmt.Errorf("jobs: job %s holds %d items more than its total: %w", j.ID, -counts.Failed, ErrCorrupt)
		}
	}
	wasDone := j.Done()
	j.Counts = counts
	if j.Kind == KindInfer && j.Done() && damaged != nil {
		j.Result = Failed
	}
	return s.finishing(tx, j, wasDone)
}

// finishing moves j from the active to the done index if it has just
// finished (it was not done before this change).
func (s *Store) finishing(tx *bbolt.Tx, j *Job, wasDone bool) error {
	if wasDone || !j.Done() {
		return nil
	}
	j.Finished = s.now()
	if err := tx.Bucket(bucketActive).Delete(activeKey(j)); err != nil {
		return err
	}
	return tx.Bucket(bucketDone).Put(doneKey(j), nil)
}

// dropStaged drops the items of submissions a crash cut short in the
// middle of their writing: no client was told of them.
func (s *Store) dropStaged(tx *bbolt.Tx) error {
	var ids [][]byte
	st := tx.Bucket(bucketStaging)
	c := st.Cursor()
	for k, _ := c.First(); k != nil; k, _ = c.Next() {
		ids = append(ids, bytes.Clone(k))
	}
	for _, id := range ids {
		if err := tx.Bucket(bucketItems).DeleteBucket(id); err != nil && !errors.Is(err, bbolt.ErrBucketNotFound) {
			return fmt.Errorf("jobs: drop the staged items of %s: %w", id, err)
		}
		if err := st.Delete(id); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the file. The Runner must be stopped first.
func (s *Store) Close() error {
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("jobs: close %s: %w", s.path, err)
	}
	return nil
}

// Path is the store file.
func (s *Store) Path() string { return s.path }

func u64(v uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return b[:]
}

func u32(v uint32) []byte {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return b[:]
}

func activeKey(j *Job) []byte { return append(u64(j.Seq), j.ID...) }

func doneKey(j *Job) []byte { return append(u64(uint64(j.Finished.UnixNano())), j.ID...) }

func idemKey(tenant, key string) []byte { return []byte(tenant + "\x00" + key) }

func counter(tx *bbolt.Tx, key []byte) int {
	v := tx.Bucket(bucketMeta).Get(key)
	if len(v) != 8 {
		return 0
	}
	return int(binary.BigEndian.Uint64(v))
}

func addCounter(tx *bbolt.Tx, key []byte, d int) error {
	n := counter(tx, key) + d
	if n < 0 {
		return fmt.Errorf("jobs: counter %s below zero: %w", key, ErrCorrupt)
	}
	return tx.Bucket(bucketMeta).Put(key, u64(uint64(n)))
}

func (s *Store) job(tx *bbolt.Tx, id string) (Job, error) {
	var j Job
	v := tx.Bucket(bucketJobs).Get([]byte(id))
	if v == nil {
		return j, ErrNotFound
	}
	j, err := decodeJob(id, v)
	if err != nil {
		return j, fmt.Errorf("jobs: %s: %w", s.path, err)
	}
	return j, nil
}

func (s *Store) putJob(tx *bbolt.Tx, j *Job) error {
	if err := j.Counts.check(); err != nil {
		return fmt.Errorf("jobs: job %s: %w", j.ID, err)
	}
	b, err := encodeJob(j)
	if err != nil {
		return err
	}
	return tx.Bucket(bucketJobs).Put([]byte(j.ID), b)
}

// setItem writes it with status next and moves the job's counts; when the
// job finishes it moves from the active index to the done index.
func (s *Store) setItem(tx *bbolt.Tx, j *Job, it *Item, next Status) error {
	items := tx.Bucket(bucketItems).Bucket([]byte(j.ID))
	if items == nil {
		return fmt.Errorf("jobs: job %s has no items: %w", j.ID, ErrCorrupt)
	}
	wasDone := j.Done()
	j.Counts.add(it.Status, -1)
	j.Counts.add(next, 1)
	it.Status = next
	v, err := encodeItem(j.ID, it)
	if err != nil {
		return err
	}
	if err := items.Put(u32(uint32(it.Index)), v); err != nil {
		return err
	}
	if j.Kind == KindInfer && next.Terminal() {
		j.Result = next
	}
	return s.finishing(tx, j, wasDone)
}

// validKey reports whether an idempotency key or name can be stored.
func validKey(s string) bool {
	if s == "" || len(s) > keyMaxBytes || !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if unicode.IsControl(c) {
			return false
		}
	}
	return true
}

// Submit writes a job and its items in one synced transaction. It returns
// the job and whether it is new: a submission whose idempotency key the
// tenant used before returns the original job (if BodyHash matches) or
// ErrConflict. Refusals (ErrTooManyItems, ErrFull, ErrInvalid,
// ErrConflict) change nothing.
func (s *Store) Submit(sp Spec) (Job, bool, error) {
	switch {
	case len(sp.Inputs) == 0 || len(sp.Inputs) > s.cfg.ItemsMax:
		return Job{}, false, fmt.Errorf("jobs: %d items, want 1 to %d: %w", len(sp.Inputs), s.cfg.ItemsMax, ErrTooManyItems)
	case sp.Kind != KindInfer && sp.Kind != KindBatch, sp.Kind == KindInfer && len(sp.Inputs) != 1:
		return Job{}, false, fmt.Errorf("jobs: kind %q with %d items: %w", sp.Kind, len(sp.Inputs), ErrInvalid)
	case !validKey(sp.Tenant) || !validKey(sp.Model):
		return Job{}, false, fmt.Errorf("jobs: tenant and model must be 1 to %d bytes of printable UTF-8: %w", keyMaxBytes, ErrInvalid)
	case sp.IdempotencyKey != "" && !validKey(sp.IdempotencyKey):
		return Job{}, false, fmt.Errorf("jobs: idempotency key must be 1 to %d bytes of printable UTF-8: %w", keyMaxBytes, ErrInvalid)
	case sp.Timeout < 0:
		return Job{}, false, fmt.Errorf("jobs: timeout %v: %w", sp.Timeout, ErrInvalid)
	}
	for i, in := range sp.Inputs {
		if len(in) > s.cfg.InputMaxBytes {
			return Job{}, false, fmt.Errorf("jobs: item %d: %d bytes, over %d: %w", i, len(in), s.cfg.InputMaxBytes, ErrInvalid)
		}
	}
	id := rand.Text()
	// Encoded before the transaction, which holds the store's one writer.
	encoded := make([][]byte, len(sp.Inputs))
	for i, in := range sp.Inputs {
		v, err := encodeItem(id, &Item{Index: i, Status: Queued, Input: in})
		if err != nil {
			return Job{}, false, err
		}
		encoded[i] = v
	}
	var out Job
	existing := false
	err := s.guard(func() error {
		// Batch: concurrent submissions (async infers, each a job of one
		// item) share a transaction and its fsync. The function may run
		// more than once (bbolt retries a failed batch call alone), so it
		// only sets out and existing, and the id is drawn outside it.
		return s.db.Batch(func(tx *bbolt.Tx) error {
			out, existing = Job{}, false
			if sp.IdempotencyKey != "" {
				j, found, err := s.idempotent(tx, sp)
				if err != nil || found {
					out, existing = j, found
					return err
				}
			}
			if counter(tx, keyJobsHeld) >= s.cfg.JobsMax || counter(tx, keyItemsHeld)+len(sp.Inputs) > s.cfg.ItemsStoredMax {
				if _, err := s.sweep(tx, true); err != nil {
					return err
				}
			}
			if n, m := counter(tx, keyJobsHeld), counter(tx, keyItemsHeld); n >= s.cfg.JobsMax || m+len(sp.Inputs) > s.cfg.ItemsStoredMax {
				return fmt.Errorf("jobs: holding %d jobs (max %d) and %d items (max %d): %w", n, s.cfg.JobsMax, m, s.cfg.ItemsStoredMax, ErrFull)
			}
			seq, err := tx.Bucket(bucketMeta).NextSequence()
			if err != nil {
				return err
			}
			created := s.now()
			j := Job{
				ID: id, Kind: sp.Kind, Tenant: sp.Tenant, Model: sp.Model, Version: sp.Version,
				Params: sp.Params, Priority: sp.Priority, Created: created,
				IdempotencyKey: sp.IdempotencyKey, BodyHash: sp.BodyHash, Seq: seq,
				Counts: Counts{Total: len(sp.Inputs), Queued: len(sp.Inputs)},
			}
			if sp.Timeout > 0 {
				j.Deadline = created.Add(sp.Timeout)
			}
			items, err := tx.Bucket(bucketItems).CreateBucket([]byte(id))
			if err != nil {
				return fmt.Errorf("jobs: items of %s: %w", id, err)
			}
			// Keys are written in order: bbolt packs pages full on an
			// append-only load.
			items.FillPercent = 1
			for i, v := range encoded {
				if err := items.Put(u32(uint32(i)), v); err != nil {
					return err
				}
			}
			if err := s.putJob(tx, &j); err != nil {
				return err
			}
			if err := tx.Bucket(bucketActive).Put(activeKey(&j), nil); err != nil {
				return err
			}
			if sp.IdempotencyKey != "" {
				if err := tx.Bucket(bucketIdem).Put(idemKey(sp.Tenant, sp.IdempotencyKey), []byte(id)); err != nil {
					return err
				}
			}
			if err := addCounter(tx, keyJobsHeld, 1); err != nil {
				return err
			}
			out = j
			return addCounter(tx, keyItemsHeld, len(sp.Inputs))
		})
	})
	if err != nil {
		return Job{}, false, err
	}
	return out, !existing, nil
}

// idempotent looks sp's idempotency key up: the job it names, if any, or
// ErrConflict if that job's request was another. A key left naming a job
// no longer held (a damaged job that retention dropped) is no key.
func (s *Store) idempotent(tx *bbolt.Tx, sp Spec) (Job, bool, error) {
	prev := tx.Bucket(bucketIdem).Get(idemKey(sp.Tenant, sp.IdempotencyKey))
	if prev == nil {
		return Job{}, false, nil
	}
	j, err := s.job(tx, string(prev))
	if errors.Is(err, ErrNotFound) {
		return Job{}, false, nil
	} else if err != nil {
		return Job{}, false, err
	}
	if j.BodyHash != sp.BodyHash {
		return Job{}, false, fmt.Errorf("jobs: key %q names job %s: %w", sp.IdempotencyKey, j.ID, ErrConflict)
	}
	return j, true, nil
}

// Get returns tenant's job id. Another tenant's job is ErrNotFound, so ids
// do not leak.
func (s *Store) Get(tenant, id string) (Job, error) {
	var j Job
	err := s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			var err error
			j, err = s.job(tx, id)
			if err == nil && j.Tenant != tenant {
				err = ErrNotFound
			}
			return err
		})
	})
	return j, err
}

// ItemsPageMax bounds the items one Items call returns.
const ItemsPageMax = 10_000

// Items returns tenant's job and at most limit of its items from index
// offset on, in input order.
func (s *Store) Items(tenant, id string, offset, limit int) (Job, []Item, error) {
	if offset < 0 || limit < 0 || limit > ItemsPageMax {
		return Job{}, nil, fmt.Errorf("jobs: offset %d, limit %d: want offset >= 0, 0 <= limit <= %d: %w", offset, limit, ItemsPageMax, ErrInvalid)
	}
	var j Job
	var out []Item
	err := s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			var err error
			if j, err = s.job(tx, id); err != nil {
				return err
			}
			if j.Tenant != tenant {
				return ErrNotFound
			}
			if offset >= j.Counts.Total || limit == 0 {
				return nil
			}
			items := tx.Bucket(bucketItems).Bucket([]byte(id))
			if items == nil {
				return fmt.Errorf("jobs: job %s has no items: %w", id, ErrCorrupt)
			}
			out = make([]Item, 0, min(limit, j.Counts.Total-offset))
			c := items.Cursor()
			for k, v := c.Seek(u32(uint32(offset))); k != nil && len(out) < limit; k, v = c.Next() {
				idx := binary.BigEndian.Uint32(k)
				it, err := decodeItem(id, idx, v)
				if err != nil {
					// A read cannot write the repair (the runner does,
					// if the job still runs): the item is shown failed
					// rather than the page refused or the bytes served.
					s.log.Error("jobs: damaged item record", "job", id, "item", idx, "file", s.path, "err", err)
					it = corruptItem(idx, err)
				}
				out = append(out, it)
			}
			return nil
		})
	})
	return j, out, err
}

// cancel marks tenant's job cancelled and its queued items cancelled; its
// running items are the runner's to withdraw. Cancelling a finished or
// cancelled job changes nothing and is not an error.
func (s *Store) cancel(tenant, id string) (Job, error) {
	var j Job
	err := s.guard(func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			var err error
			if j, err = s.job(tx, id); err != nil {
				return err
			}
			if j.Tenant != tenant {
				return ErrNotFound
			}
			if j.Done() || j.CancelRequested {
				return nil
			}
			j.CancelRequested = true
			if j.Counts.Queued > 0 {
				items := tx.Bucket(bucketItems).Bucket([]byte(id))
				if items == nil {
					return fmt.Errorf("jobs: job %s has no items: %w", id, ErrCorrupt)
				}
				var queued []uint32
				c := items.Cursor()
				for k, v := c.First(); k != nil; k, v = c.Next() {
					if len(v) > 0 && v[0] == statusByte[Queued] {
						queued = append(queued, binary.BigEndian.Uint32(k))
					}
				}
				for _, idx := range queued {
					it, err := decodeItem(id, idx, items.Get(u32(idx)))
					if errors.Is(err, ErrCorrupt) {
						if err := s.repair(tx, &j); err != nil {
							return err
						}
						continue
					} else if err != nil {
						return err
					}
					if it.Status != Queued {
						continue // a repair failed it
					}
					it.Error = &ItemError{Code: "cancelled", Message: "the job was cancelled", HTTPStatus: 499}
					if err := s.setItem(tx, &j, &it, Cancelled); err != nil {
						return err
					}
				}
			}
			return s.putJob(tx, &j)
		})
	})
	return j, err
}

// Sweep drops finished jobs older than RetainAge, and the oldest finished
// jobs beyond RetainMax, with their items and idempotency keys. It returns
// how many it dropped.
func (s *Store) Sweep() (int, error) {
	n := 0
	err := s.guard(func() error {
		return s.db.Update(func(tx *bbolt.Tx) error {
			var err error
			n, err = s.sweep(tx, false)
			return err
		})
	})
	return n, err
}

// sweepBatchMax bounds the jobs one sweep transaction drops, so a sweep
// never holds the writer long; the next sweep goes on.
const sweepBatchMax = 1_000

// sweep is Sweep inside tx. full also drops the oldest finished job when
// the store is at its bounds, to make room for a submission.
func (s *Store) sweep(tx *bbolt.Tx, full bool) (int, error) {
	done := tx.Bucket(bucketDone)
	held := done.Stats().KeyN
	cutoff := s.now().Add(-s.cfg.RetainAge)
	var drop [][]byte
	c := done.Cursor()
	for k, _ := c.First(); k != nil && len(drop) < sweepBatchMax; k, _ = c.Next() {
		if len(k) <= 8 {
			return 0, fmt.Errorf("jobs: %s: %w: done key %x", s.path, ErrCorrupt, k)
		}
		old := time.Unix(0, int64(binary.BigEndian.Uint64(k[:8]))).Before(cutoff)
		over := held-len(drop) > s.cfg.RetainMax
		if !old && !over && !(full && len(drop) == 0) {
			break
		}
		drop = append(drop, bytes.Clone(k))
	}
	for _, k := range drop {
		id := string(k[8:])
		j, err := s.job(tx, id)
		if errors.Is(err, ErrCorrupt) {
			// A damaged record goes with its job; its idempotency key,
			// which only the record names, is left to be taken over.
			j = Job{ID: id}
			if items := tx.Bucket(bucketItems).Bucket([]byte(id)); items != nil {
				j.Counts.Total = items.Stats().KeyN
			}
			s.log.Error("jobs: retention drops a job with a damaged record", "job", id, "file", s.path, "err", err)
		} else if err != nil {
			return 0, err
		}
		if err := tx.Bucket(bucketItems).DeleteBucket([]byte(id)); err != nil && !errors.Is(err, bbolt.ErrBucketNotFound) {
			return 0, fmt.Errorf("jobs: drop items of %s: %w", id, err)
		}
		if err := tx.Bucket(bucketJobs).Delete([]byte(id)); err != nil {
			return 0, err
		}
		if j.IdempotencyKey != "" {
			if err := tx.Bucket(bucketIdem).Delete(idemKey(j.Tenant, j.IdempotencyKey)); err != nil {
				return 0, err
			}
		}
		if err := done.Delete(k); err != nil {
			return 0, err
		}
		if err := addCounter(tx, keyJobsHeld, -1); err != nil {
			return 0, err
		}
		// Clamped: a damaged job's total is its records' count, which
		// may not be what was added.
		if err := addCounter(tx, keyItemsHeld, -min(j.Counts.Total, counter(tx, keyItemsHeld))); err != nil {
			return 0, err
		}
	}
	return len(drop), nil
}

// Held returns the jobs and items the store holds.
func (s *Store) Held() (jobs, items int, err error) {
	err = s.guard(func() error {
		return s.db.View(func(tx *bbolt.Tx) error {
			jobs, items = counter(tx, keyJobsHeld), counter(tx, keyItemsHeld)
			return nil
		})
	})
	return jobs, items, err
}
