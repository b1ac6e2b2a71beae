package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/engine/httpapi"
	"github.com/batchd/batchd/engine/jobs"
)

// Jobs is the durable job store of async infers and batch jobs
// (jobs.Config, and the HTTP adapter's job limits).
type Jobs struct {
	// Dir holds the store file, jobs.db. Empty: $XDG_STATE_HOME/batchd,
	// or ~/.local/state/batchd without it.
	Dir string `yaml:"dir"`
	// ItemsMax bounds the items of one batch job.
	ItemsMax int `yaml:"items_max"`
	// BatchAsyncAbove: a /v1 batch of more items is a job even without
	// "async".
	BatchAsyncAbove int `yaml:"batch_async_above"`
	// BodyMaxBytes bounds the body of a /v1 batch (http.body_max_bytes
	// when that is larger).
	BodyMaxBytes int64 `yaml:"body_max_bytes"`
	// JobsMax and ItemsStoredMax bound what the store holds; past them a
	// submission is 503.
	JobsMax        int `yaml:"jobs_max"`
	ItemsStoredMax int `yaml:"items_stored_max"`
	// RetainAge and RetainMax bound the finished jobs kept; SweepEvery is
	// the period of the sweep that drops the rest.
	RetainAge  time.Duration `yaml:"retain_age"`
	RetainMax  int           `yaml:"retain_max"`
	SweepEvery time.Duration `yaml:"sweep_every"`
	// AttemptMax bounds the runs of an item cut short by a crash or stop.
	AttemptMax int `yaml:"attempt_max"`
	// WindowJob and WindowTotal bound the items in the engine at once, per
	// job and over all jobs.
	WindowJob   int `yaml:"window_job"`
	WindowTotal int `yaml:"window_total"`
	// FlushItems and FlushEvery group the writes of finished items.
	FlushItems int           `yaml:"flush_items"`
	FlushEvery time.Duration `yaml:"flush_every"`
	// RetryMax bounds the retries of an item refused for load.
	RetryMax int `yaml:"retry_max"`
	// StreamsMax bounds the large batch jobs (over 1 MiB of inputs) read
	// into the store at once; one more is 503 at once.
	StreamsMax int `yaml:"streams_max"`
}

// jobsFile is the store's file name in Jobs.Dir.
const jobsFile = "jobs.db"

// Limits on the jobs section: sizes a typo could blow up.
const (
	jobsItemsMaxMax  = 1 << 20
	jobsStoredMaxMax = 1 << 28
	jobsRetainMaxAge = 30 * 24 * time.Hour
	// jobsStreamsMaxMax: each large submission holds a part (about
	// 1 MiB) in memory and takes turns at the store's one writer.
	jobsStreamsMaxMax = 1_024
)

func defaultJobs() Jobs {
	j := jobs.DefaultConfig("")
	h := httpapi.DefaultConfig()
	return Jobs{
		ItemsMax:        h.JobItemsMax,
		BatchAsyncAbove: h.BatchAsyncAbove,
		BodyMaxBytes:    h.JobBodyMaxBytes,
		JobsMax:         j.JobsMax,
		ItemsStoredMax:  j.ItemsStoredMax,
		RetainAge:       j.RetainAge,
		RetainMax:       j.RetainMax,
		SweepEvery:      j.SweepEvery,
		AttemptMax:      j.AttemptMax,
		WindowJob:       j.WindowJob,
		WindowTotal:     j.WindowTotal,
		FlushItems:      j.FlushItems,
		FlushEvery:      j.FlushEvery,
		RetryMax:        j.RetryMax,
		StreamsMax:      j.StreamsMax,
	}
}

func (v *validator) jobs() {
	j := v.f.Jobs
	v.IntIn("jobs.items_max", j.ItemsMax, 1, jobsItemsMaxMax)
	v.IntIn("jobs.batch_async_above", j.BatchAsyncAbove, 1, jobsItemsMaxMax)
	if j.BodyMaxBytes < 1 || j.BodyMaxBytes > bodyMaxBytesMax {
		v.Bad("jobs.body_max_bytes", "%d: want 1 to %d", j.BodyMaxBytes, bodyMaxBytesMax)
	}
	v.IntIn("jobs.jobs_max", j.JobsMax, 1, jobsStoredMaxMax)
	v.IntIn("jobs.items_stored_max", j.ItemsStoredMax, j.ItemsMax, jobsStoredMaxMax)
	v.DurIn("jobs.retain_age", j.RetainAge, time.Second, jobsRetainMaxAge)
	v.IntIn("jobs.retain_max", j.RetainMax, 1, jobsStoredMaxMax)
	v.DurIn("jobs.sweep_every", j.SweepEvery, 10*time.Millisecond, time.Hour)
	v.IntIn("jobs.attempt_max", j.AttemptMax, 1, schema.AttemptMaxMax)
	v.IntIn("jobs.window_job", j.WindowJob, 1, schema.QueueTotalMaxMax)
	v.IntIn("jobs.window_total", j.WindowTotal, j.WindowJob, schema.QueueTotalMaxMax)
	v.IntIn("jobs.flush_items", j.FlushItems, 1, 1<<20)
	v.DurIn("jobs.flush_every", j.FlushEvery, time.Microsecond, time.Second)
	v.IntIn("jobs.retry_max", j.RetryMax, 0, 1<<20)
	v.IntIn("jobs.streams_max", j.StreamsMax, 1, jobsStreamsMaxMax)
}

// JobsDir is the directory of the job store: Jobs.Dir, or the user's
// state directory ($XDG_STATE_HOME/batchd, else ~/.local/state/batchd).
func (f *File) JobsDir() (string, error) {
	if f.Jobs.Dir != "" {
		return f.Jobs.Dir, nil
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "batchd"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return "", errors.New("config: jobs.dir: not set, and no $XDG_STATE_HOME or home directory to default to: set it (or --data-dir)")
	}
	return filepath.Join(home, ".local", "state", "batchd"), nil
}

// JobsConfig returns the job store's configuration, its file in JobsDir.
// Call it on a validated File.
func (f *File) JobsConfig() (jobs.Config, error) {
	dir, err := f.JobsDir()
	if err != nil {
		return jobs.Config{}, err
	}
	j := f.Jobs
	c := jobs.DefaultConfig(filepath.Join(dir, jobsFile))
	c.ItemsMax = j.ItemsMax
	c.JobsMax = j.JobsMax
	c.ItemsStoredMax = j.ItemsStoredMax
	c.InputMaxBytes = f.HTTP.InputMaxBytes
	c.RetainAge = j.RetainAge
	c.RetainMax = j.RetainMax
	c.SweepEvery = j.SweepEvery
	c.AttemptMax = j.AttemptMax
	c.WindowJob = j.WindowJob
	c.WindowTotal = j.WindowTotal
	c.FlushItems = j.FlushItems
	c.FlushEvery = j.FlushEvery
	c.RetryMax = j.RetryMax
	c.StreamsMax = j.StreamsMax
	if err := c.Validate(); err != nil {
		return jobs.Config{}, fmt.Errorf("config: %w: %w", ErrInvalid, err)
	}
	return c, nil
}
