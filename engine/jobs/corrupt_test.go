package jobs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/batchd/batchd/actors"
)

// logBuf collects a store's log lines, for tests that a damage is
// reported.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func withLog(cfg Config) (Config, *logBuf) {
	lb := &logBuf{}
	cfg.Log = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return cfg, lb
}

// editRecord opens the closed store file with bbolt alone and passes fn
// the bytes of one record (a copy), writing back what fn returns: the
// damage a disk or a stray write could do, below the store's own code.
func editRecord(t *testing.T, path string, bucket func(tx *bbolt.Tx) *bbolt.Bucket, key []byte, fn func(v []byte) []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(func(tx *bbolt.Tx) error {
		b := bucket(tx)
		v := b.Get(key)
		if v == nil {
			t.Fatalf("no record %x", key)
		}
		return b.Put(key, fn(bytes.Clone(v)))
	}); err != nil {
		t.Fatal(err)
	}
}

func itemBucket(id string) func(tx *bbolt.Tx) *bbolt.Bucket {
	return func(tx *bbolt.Tx) *bbolt.Bucket { return tx.Bucket(bucketItems).Bucket([]byte(id)) }
}

// flipInput changes one byte of an item's input, in place: the record
// still decodes, as the probe's did, and only its checksum can tell.
func flipInput(in string) func(v []byte) []byte {
	return func(v []byte) []byte {
		i := bytes.Index(v, []byte(in))
		if i < 0 {
			panic("input not in record: " + in)
		}
		v[i] ^= 0x01
		return v
	}
}

// corruptRun opens the store, runs every job to its end with the fake
// engine, and returns the store and runner.
func corruptRun(t *testing.T, cfg Config) (*Store, *Runner) {
	t.Helper()
	s, err := Open(cfg, nil)
	if err != nil {
		t.Fatalf("open after the damage: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, startRunner(t, s, newFake())
}

// One changed byte in a queued item's input: that item fails (code
// corrupt) and is reported naming its job; the job's other items and
// another job complete, each with its own input's output.
func TestCorruptItemFailsAlone(t *testing.T) {
	cfg, lb := withLog(testConfig(t))
	s := openStore(t, cfg, newClock())
	inA, inB := inputs(6, "a"), inputs(6, "b")
	a, _, err := s.Submit(batchSpec("t", inA))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.Submit(batchSpec("t", inB))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	editRecord(t, cfg.Path, itemBucket(a.ID), u32(2), flipInput(inA[2]))

	_, r := corruptRun(t, cfg)
	if j := waitDone(t, r, "t", b.ID); j.Counts.Completed != len(inB) {
		t.Fatalf("the other job: %+v", j.Counts)
	}
	checkOutputs(t, r, "t", b.ID, inB, 1)
	j := waitDone(t, r, "t", a.ID)
	if j.Counts.Completed != len(inA)-1 || j.Counts.Failed != 1 {
		t.Fatalf("damaged job: %+v, want one item failed", j.Counts)
	}
	_, items, err := r.Items("t", a.ID, 0, len(inA))
	if err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		if i == 2 {
			if it.Status != Failed || it.Error == nil || it.Error.Code != codeCorrupt || it.Output != "" {
				t.Fatalf("damaged item: %+v", it)
			}
			continue
		}
		if it.Status != Completed || it.Input != inA[i] || !actors.EmulatedOutputMatches(it.Output, "m", "v1", actors.InputHash(inA[i])) {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	if log := lb.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, a.ID) {
		t.Fatalf("no error naming job %s in the log:\n%s", a.ID, log)
	}
}

// A damaged status byte (queued read as completed) is found too: the
// item fails rather than the job waiting for ever on an item no scan
// finds.
func TestCorruptStatusByte(t *testing.T) {
	cfg, _ := withLog(testConfig(t))
	s := openStore(t, cfg, newClock())
	in := inputs(4, "s")
	a, _, err := s.Submit(batchSpec("t", in))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	editRecord(t, cfg.Path, itemBucket(a.ID), u32(1), func(v []byte) []byte {
		v[0] = statusByte[Completed]
		return v
	})
	_, r := corruptRun(t, cfg)
	j := waitDone(t, r, "t", a.ID)
	if j.Counts.Completed != 3 || j.Counts.Failed != 1 {
		t.Fatalf("counts %+v, want 3 completed and 1 failed", j.Counts)
	}
}

// An item damaged while it ran (found at Open's recovery) fails alone;
// the start goes on.
func TestCorruptRunningItem(t *testing.T) {
	cfg, _ := withLog(testConfig(t))
	s := openStore(t, cfg, newClock())
	in := inputs(3, "r")
	a, _, err := s.Submit(batchSpec("t", in))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.step(nil, []want{{id: a.ID, n: 3}}); err != nil || len(res.claims) != 3 {
		t.Fatalf("claim: %+v %v", res, err)
	}
	_ = s.Close()
	editRecord(t, cfg.Path, itemBucket(a.ID), u32(0), flipInput(in[0]))
	_, r := corruptRun(t, cfg)
	j := waitDone(t, r, "t", a.ID)
	if j.Counts.Completed != 2 || j.Counts.Failed != 1 {
		t.Fatalf("counts %+v, want 2 completed and 1 failed", j.Counts)
	}
}

// A damaged job record gives up that job alone, loudly; the other job
// runs, and reading the damaged one is an error, not its bytes.
func TestCorruptJobRecord(t *testing.T) {
	cfg, lb := withLog(testConfig(t))
	s := openStore(t, cfg, newClock())
	inA, inB := inputs(3, "ja"), inputs(3, "jb")
	a, _, err := s.Submit(batchSpec("t", inA))
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := s.Submit(batchSpec("t", inB))
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	editRecord(t, cfg.Path, func(tx *bbolt.Tx) *bbolt.Bucket { return tx.Bucket(bucketJobs) }, []byte(a.ID), func(v []byte) []byte {
		i := bytes.Index(v, []byte(`"model":"m"`))
		v[i+len(`"model":"`)] = 'n'
		return v
	})
	_, r := corruptRun(t, cfg)
	waitDone(t, r, "t", b.ID)
	checkOutputs(t, r, "t", b.ID, inB, 1)
	if _, err := r.Get("t", a.ID); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("get the damaged job: %v, want ErrCorrupt", err)
	}
	if log := lb.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, a.ID) {
		t.Fatalf("no error naming job %s in the log:\n%s", a.ID, log)
	}
}

// A damaged item of a finished job reads as failed (code corrupt), not as
// its altered bytes, and the page is still served.
func TestCorruptFinishedItemRead(t *testing.T) {
	cfg, _ := withLog(testConfig(t))
	s := openStore(t, cfg, newClock())
	in := inputs(3, "f")
	a, _, err := s.Submit(batchSpec("t", in))
	if err != nil {
		t.Fatal(err)
	}
	finishAll(t, s, a.ID, 3)
	_ = s.Close()
	editRecord(t, cfg.Path, itemBucket(a.ID), u32(1), flipInput("out-"+in[1]))
	s = openStore(t, cfg, newClock())
	_, items, err := s.Items("t", a.ID, 0, 3)
	if err != nil || len(items) != 3 {
		t.Fatalf("%d items, %v", len(items), err)
	}
	if it := items[1]; it.Status != Failed || it.Error == nil || it.Error.Code != codeCorrupt || it.Output != "" {
		t.Fatalf("damaged item read as %+v", it)
	}
	if items[0].Status != Completed || items[2].Status != Completed {
		t.Fatalf("the others: %+v", items)
	}
}

// An empty store file is refused, naming it, and left as it is; a
// missing one is created.
func TestEmptyFile(t *testing.T) {
	cfg := testConfig(t)
	if err := os.WriteFile(cfg.Path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(cfg, nil)
	if err == nil {
		_ = s.Close()
		t.Fatal("an empty file opened as a store")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), cfg.Path) || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("error %q: want ErrCorrupt naming %s as empty", err, cfg.Path)
	}
	if fi, err := os.Stat(cfg.Path); err != nil || fi.Size() != 0 {
		t.Fatalf("the file was changed: %v %v", fi, err)
	}
	fresh := testConfig(t)
	s, err = Open(fresh, nil)
	if err != nil {
		t.Fatalf("a missing file: %v", err)
	}
	_ = s.Close()
}

// A store of format 1 (no checksums) is refused with an error saying so,
// not read as if its records had them.
func TestOldFormat(t *testing.T) {
	cfg := testConfig(t)
	s := openStore(t, cfg, newClock())
	_ = s.Close()
	editRecord(t, cfg.Path, func(tx *bbolt.Tx) *bbolt.Bucket { return tx.Bucket(bucketMeta) }, keyFormat, func([]byte) []byte {
		return binary.BigEndian.AppendUint64(nil, 1)
	})
	s, err := Open(cfg, nil)
	if err == nil {
		_ = s.Close()
		t.Fatal("a format 1 file opened")
	}
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), cfg.Path) {
		t.Fatalf("error %q: want ErrFormat naming the file", err)
	}
}
