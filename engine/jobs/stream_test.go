package jobs

import (
	"errors"
	"testing"

	"go.etcd.io/bbolt"
)

func stagedBuckets(t *testing.T, path string) (staging, items int) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_ = db.View(func(tx *bbolt.Tx) error {
		staging = tx.Bucket(bucketStaging).Stats().KeyN
		items = tx.Bucket(bucketItems).Stats().BucketN - 1 // less itself
		return nil
	})
	return staging, items
}

// A submission in parts: several parts written, the job whole at Commit,
// its items in order; at most StreamsMax open, one more ErrBusy at once.
func TestSubmissionParts(t *testing.T) {
	cfg := testConfig(t)
	cfg.StreamsMax = 1
	s := openStore(t, cfg, newClock())
	in := inputs(2*streamChunkItems+7, "p")
	sub, err := s.Begin(Spec{Kind: KindBatch, Tenant: "t", Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Begin(Spec{Kind: KindBatch, Tenant: "t", Model: "m"}); !errors.Is(err, ErrBusy) {
		t.Fatalf("second submission: %v, want ErrBusy", err)
	}
	for _, x := range in {
		if err := sub.Add(x); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, _ := s.Held(); n != 0 {
		t.Fatalf("%d jobs held before the commit", n)
	}
	j, created, err := sub.Commit(Spec{IdempotencyKey: "k", BodyHash: "h"})
	if err != nil || !created || j.Counts.Total != len(in) || j.Counts.Queued != len(in) {
		t.Fatalf("commit: %+v %v %v", j.Counts, created, err)
	}
	_, items, err := s.Items("t", j.ID, 0, len(in))
	if err != nil || len(items) != len(in) {
		t.Fatalf("%d items, %v", len(items), err)
	}
	for i, it := range items {
		if it.Input != in[i] || it.Status != Queued || it.Index != i {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	// The place is free again; the same key and body find the job, and
	// what this one staged goes.
	again, err := s.Begin(Spec{Kind: KindBatch, Tenant: "t", Model: "m"})
	if err != nil {
		t.Fatalf("after a commit: %v", err)
	}
	for _, x := range in {
		if err := again.Add(x); err != nil {
			t.Fatal(err)
		}
	}
	if j2, created, err := again.Commit(Spec{IdempotencyKey: "k", BodyHash: "h"}); err != nil || created || j2.ID != j.ID {
		t.Fatalf("replay: %s %v %v, want %s", j2.ID, created, err, j.ID)
	}
	conflict, _ := s.Begin(Spec{Kind: KindBatch, Tenant: "t", Model: "m"})
	_ = conflict.Add("other")
	if _, _, err := conflict.Commit(Spec{IdempotencyKey: "k", BodyHash: "other"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("another body under the key: %v", err)
	}
	if n, m, _ := s.Held(); n != 1 || m != len(in) {
		t.Fatalf("held %d jobs, %d items; want 1, %d", n, m, len(in))
	}
	_ = s.Close()
	if staging, buckets := stagedBuckets(t, cfg.Path); staging != 0 || buckets != 1 {
		t.Fatalf("%d staged, %d item buckets left; want 0 and 1", staging, buckets)
	}
}

// An aborted submission, and one a crash cut short, leave nothing: Abort
// drops what it staged, Open what a crash left.
func TestSubmissionAbortAndCrash(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg, newClock())
	for _, crash := range []bool{false, true} {
		sub, err := s.Begin(Spec{Kind: KindBatch, Tenant: "t", Model: "m"})
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range inputs(streamChunkItems+1, "a") {
			if err := sub.Add(x); err != nil {
				t.Fatal(err)
			}
		}
		if !crash {
			sub.Abort()
		}
	}
	_ = s.Close() // the second never ended: as after a crash
	if staging, buckets := stagedBuckets(t, cfg.Path); staging != 1 || buckets != 1 {
		t.Fatalf("before reopening: %d staged, %d item buckets; want the crashed one's", staging, buckets)
	}
	s = openStore(t, cfg, newClock())
	if n, m, _ := s.Held(); n != 0 || m != 0 {
		t.Fatalf("held %d jobs, %d items", n, m)
	}
	_ = s.Close()
	if staging, buckets := stagedBuckets(t, cfg.Path); staging != 0 || buckets != 0 {
		t.Fatalf("after reopening: %d staged, %d item buckets; want none", staging, buckets)
	}
}
