package jobs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock is a wall clock tests move by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func testConfig(t *testing.T) Config {
	cfg := DefaultConfig(filepath.Join(t.TempDir(), "jobs.db"))
	cfg.OpenTimeout = time.Second
	return cfg
}

func openStore(t *testing.T, cfg Config, c *clock) *Store {
	t.Helper()
	s, err := Open(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func inputs(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%d", prefix, i)
	}
	return out
}

func batchSpec(tenant string, in []string) Spec {
	return Spec{Kind: KindBatch, Tenant: tenant, Model: "m", Inputs: in, BodyHash: "h-" + strings.Join(in, ",")}
}

func TestSubmitAndRead(t *testing.T) {
	c := newClock()
	s := openStore(t, testConfig(t), c)
	in := inputs(300, "x")
	j, created, err := s.Submit(batchSpec("alice", in))
	if err != nil || !created {
		t.Fatalf("submit: %v created=%v", err, created)
	}
	if j.Status() != Queued || j.Counts != (Counts{Total: 300, Queued: 300}) || !j.Created.Equal(c.now()) {
		t.Errorf("new job %+v status %s", j, j.Status())
	}
	got, err := s.Get("alice", j.ID)
	if err != nil || got.ID != j.ID || got.Counts.Total != 300 {
		t.Fatalf("get: %+v %v", got, err)
	}
	if _, err := s.Get("bob", j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's job: %v, want ErrNotFound", err)
	}
	if _, _, err := s.Items("bob", j.ID, 0, 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's items: %v, want ErrNotFound", err)
	}
	// Pages walk input order.
	var all []Item
	for off := 0; off < 300; off += 128 {
		_, page, err := s.Items("alice", j.ID, off, 128)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page...)
	}
	if len(all) != 300 {
		t.Fatalf("%d items", len(all))
	}
	for i, it := range all {
		if it.Index != i || it.Input != in[i] || it.Status != Queued {
			t.Fatalf("item %d: %+v", i, it)
		}
	}
	if _, page, err := s.Items("alice", j.ID, 300, 10); err != nil || len(page) != 0 {
		t.Errorf("past the end: %d items, %v", len(page), err)
	}
	if _, _, err := s.Items("alice", j.ID, 0, ItemsPageMax+1); !errors.Is(err, ErrInvalid) {
		t.Errorf("huge page: %v", err)
	}
}

// Refused submissions change nothing.
func TestSubmitLimits(t *testing.T) {
	cfg := testConfig(t)
	cfg.ItemsMax, cfg.JobsMax, cfg.ItemsStoredMax, cfg.InputMaxBytes = 10, 2, 15, 8
	s := openStore(t, cfg, newClock())
	for _, c := range []struct {
		name string
		sp   Spec
		want error
	}{
		{"no items", batchSpec("a", []string{}), ErrTooManyItems},
		{"too many items", batchSpec("a", inputs(11, "x")), ErrTooManyItems},
		{"long input", batchSpec("a", []string{"123456789"}), ErrInvalid},
		{"infer of two", Spec{Kind: KindInfer, Tenant: "a", Model: "m", Inputs: []string{"a", "b"}}, ErrInvalid},
		{"bad key", Spec{Kind: KindBatch, Tenant: "a", Model: "m", Inputs: []string{"a"}, IdempotencyKey: "a\nb"}, ErrInvalid},
		{"no tenant", Spec{Kind: KindBatch, Model: "m", Inputs: []string{"a"}}, ErrInvalid},
	} {
		if _, _, err := s.Submit(c.sp); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n, m, _ := s.Held(); n != 0 || m != 0 {
		t.Fatalf("refusals stored %d jobs, %d items", n, m)
	}
	if _, _, err := s.Submit(batchSpec("a", inputs(10, "a"))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Submit(batchSpec("a", inputs(6, "b"))); !errors.Is(err, ErrFull) {
		t.Errorf("over ItemsStoredMax: %v", err)
	}
	if _, _, err := s.Submit(batchSpec("a", inputs(5, "c"))); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Submit(batchSpec("a", inputs(1, "d"))); !errors.Is(err, ErrFull) {
		t.Errorf("over JobsMax (nothing finished to drop): %v", err)
	}
	if n, m, _ := s.Held(); n != 2 || m != 15 {
		t.Errorf("held %d jobs, %d items; want 2, 15", n, m)
	}
}

func TestIdempotency(t *testing.T) {
	s := openStore(t, testConfig(t), newClock())
	sp := batchSpec("alice", inputs(3, "x"))
	sp.IdempotencyKey, sp.BodyHash = "order-17", "hash-1"
	j1, created, err := s.Submit(sp)
	if err != nil || !created {
		t.Fatal(err)
	}
	j2, created, err := s.Submit(sp)
	if err != nil || created || j2.ID != j1.ID {
		t.Errorf("retry: id %s created %v err %v; want the original %s", j2.ID, created, err, j1.ID)
	}
	other := sp
	other.BodyHash = "hash-2"
	if _, _, err := s.Submit(other); !errors.Is(err, ErrConflict) {
		t.Errorf("same key, other body: %v, want ErrConflict", err)
	}
	// Keys are per tenant.
	bob := sp
	bob.Tenant = "bob"
	j3, created, err := s.Submit(bob)
	if err != nil || !created || j3.ID == j1.ID {
		t.Errorf("bob's key: %s created %v err %v", j3.ID, created, err)
	}
	if n, _, _ := s.Held(); n != 2 {
		t.Errorf("%d jobs held, want 2", n)
	}
}

// finishAll runs every item of job id through a step, completed.
func finishAll(t *testing.T, s *Store, id string, n int) {
	t.Helper()
	res, err := s.step(nil, []want{{id: id, n: n}})
	if err != nil || len(res.claims) != n {
		t.Fatalf("claim: %d claims, %v", len(res.claims), err)
	}
	var outs []outcome
	for _, c := range res.claims {
		outs = append(outs, outcome{id: id, index: c.index, next: Completed, countAttempt: true, output: "out-" + c.input})
	}
	if _, err := s.step(outs, nil); err != nil {
		t.Fatal(err)
	}
}

func TestStepWritesOnce(t *testing.T) {
	s := openStore(t, testConfig(t), newClock())
	j, _, _ := s.Submit(batchSpec("a", inputs(5, "x")))
	res, err := s.step(nil, []want{{id: j.ID, n: 3}})
	if err != nil || len(res.claims) != 3 || res.cursor[j.ID] != 3 || res.exhausted[j.ID] {
		t.Fatalf("claims %+v cursor %v exhausted %v err %v", res.claims, res.cursor, res.exhausted, err)
	}
	o := outcome{id: j.ID, index: 1, next: Completed, countAttempt: true, output: "first"}
	if _, err := s.step([]outcome{o}, nil); err != nil {
		t.Fatal(err)
	}
	// A second result for the same item (a superseded run) is dropped.
	o.output = "second"
	res, err = s.step([]outcome{o}, nil)
	if err != nil || res.stale != 1 {
		t.Fatalf("stale %d, %v", res.stale, err)
	}
	got, items, _ := s.Items("a", j.ID, 0, 5)
	if items[1].Output != "first" || items[1].Attempts != 1 || items[1].Status != Completed {
		t.Errorf("item 1: %+v", items[1])
	}
	if got.Counts != (Counts{Total: 5, Queued: 2, Running: 2, Completed: 1}) || got.Status() != Running {
		t.Errorf("counts %+v status %s", got.Counts, got.Status())
	}
	// A requeue (load refusal) counts no attempt and is claimable again.
	if _, err := s.step([]outcome{{id: j.ID, index: 0, next: Queued}}, nil); err != nil {
		t.Fatal(err)
	}
	res, err = s.step(nil, []want{{id: j.ID, retry: []uint32{0}, from: 3, n: 10}})
	if err != nil || len(res.claims) != 3 || res.claims[0].index != 0 || res.claims[0].attempts != 0 || !res.exhausted[j.ID] {
		t.Errorf("retry claim %+v exhausted %v err %v", res.claims, res.exhausted, err)
	}
}

// Open after a crash queues the running items again with an attempt
// counted, and fails those past AttemptMax; finished results stay.
func TestReopenRecovers(t *testing.T) {
	cfg := testConfig(t)
	cfg.AttemptMax = 2
	c := newClock()
	s, err := Open(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	j, _, _ := s.Submit(batchSpec("a", inputs(4, "x")))
	res, err := s.step(nil, []want{{id: j.ID, n: 3}})
	if err != nil || len(res.claims) != 3 {
		t.Fatal(len(res.claims), err)
	}
	if _, err := s.step([]outcome{{id: j.ID, index: 0, next: Completed, countAttempt: true, output: "done"}}, nil); err != nil {
		t.Fatal(err)
	}
	// No clean stop: items 1 and 2 stay running in the file.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(cfg, c.now)
	if err != nil {
		t.Fatal(err)
	}
	got, items, _ := s.Items("a", j.ID, 0, 4)
	wantItems := []struct {
		st  Status
		att int
	}{{Completed, 1}, {Queued, 1}, {Queued, 1}, {Queued, 0}}
	for i, w := range wantItems {
		if items[i].Status != w.st || items[i].Attempts != w.att {
			t.Errorf("after 1 crash, item %d: %s attempts %d, want %s %d", i, items[i].Status, items[i].Attempts, w.st, w.att)
		}
	}
	if items[0].Output != "done" || got.Counts != (Counts{Total: 4, Queued: 3, Completed: 1}) {
		t.Errorf("job %+v item 0 %+v", got.Counts, items[0])
	}
	// Crash again with item 1 running: its second interrupted run is the
	// last AttemptMax allows.
	if res, err := s.step(nil, []want{{id: j.ID, n: 1}}); err != nil || len(res.claims) != 1 || res.claims[0].index != 1 {
		t.Fatal(res.claims, err)
	}
	_ = s.Close()
	s = openStore(t, cfg, c)
	got, items, _ = s.Items("a", j.ID, 0, 4)
	if items[1].Status != Failed || items[1].Attempts != 2 || items[1].Error == nil || items[1].Error.Code != "attempts" {
		t.Errorf("item 1 after 2 crashes: %+v", items[1])
	}
	if got.Counts != (Counts{Total: 4, Queued: 2, Completed: 1, Failed: 1}) {
		t.Errorf("counts %+v", got.Counts)
	}
}

func TestRetentionSweep(t *testing.T) {
	cfg := testConfig(t)
	cfg.RetainAge, cfg.RetainMax = time.Hour, 3
	c := newClock()
	s := openStore(t, cfg, c)
	var ids []string
	for i := range 5 {
		sp := batchSpec("a", inputs(2, fmt.Sprint("j", i)))
		sp.IdempotencyKey = fmt.Sprint("k", i)
		j, _, err := s.Submit(sp)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
		finishAll(t, s, j.ID, 2)
		c.advance(time.Minute)
	}
	unfinished, _, _ := s.Submit(batchSpec("a", inputs(2, "open")))
	// Count: only the newest 3 finished jobs are kept.
	if n, err := s.Sweep(); err != nil || n != 2 {
		t.Fatalf("count sweep dropped %d, %v; want 2", n, err)
	}
	for i, id := range ids {
		_, err := s.Get("a", id)
		if gone := errors.Is(err, ErrNotFound); gone != (i < 2) {
			t.Errorf("job %d: err %v after the count sweep", i, err)
		}
	}
	// A dropped job's idempotency key is free again.
	sp := batchSpec("a", inputs(2, "again"))
	sp.IdempotencyKey = "k0"
	if _, created, err := s.Submit(sp); err != nil || !created {
		t.Errorf("reused key of a dropped job: created %v, %v", created, err)
	}
	// Age: an hour after they finished, all the finished ones go; the
	// unfinished ones stay whatever their age.
	c.advance(time.Hour)
	if n, err := s.Sweep(); err != nil || n != 3 {
		t.Fatalf("age sweep dropped %d, %v; want 3", n, err)
	}
	if _, err := s.Get("a", unfinished.ID); err != nil {
		t.Errorf("unfinished job swept: %v", err)
	}
	if n, m, _ := s.Held(); n != 2 || m != 4 {
		t.Errorf("held %d jobs, %d items; want 2, 4", n, m)
	}
}

// storeOf20Jobs writes a store of 20 jobs of 200 items, closes it, and
// returns its configuration and its bytes.
func storeOf20Jobs(t *testing.T) (Config, []byte) {
	t.Helper()
	cfg := testConfig(t)
	s, err := Open(cfg, newClock().now)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if _, _, err := s.Submit(batchSpec("a", inputs(200, fmt.Sprint("j", i)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, data
}

// A damaged file is a start-up error that names it, never an empty store.
func TestCorruptFile(t *testing.T) {
	cfg, good := storeOf20Jobs(t)
	c := newClock()
	garbage := append([]byte(nil), good...)
	for i := 4096 * 2; i < len(garbage); i += 3 {
		garbage[i] ^= 0x5a
	}
	headerOnly := append([]byte(nil), good...)
	for i := 0; i < 4096*2; i++ {
		headerOnly[i] = byte(i * 7)
	}
	for _, c2 := range []struct {
		name string
		data []byte
	}{
		{"truncated", good[:len(good)/3]},
		{"tiny", good[:100]},
		{"garbage pages", garbage},
		{"garbage meta", headerOnly},
	} {
		t.Run(c2.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "jobs.db")
			if err := os.WriteFile(p, c2.data, 0o600); err != nil {
				t.Fatal(err)
			}
			cfg2 := cfg
			cfg2.Path = p
			s, err := Open(cfg2, c.now)
			if err == nil {
				_ = s.Close()
				t.Fatal("opened a damaged file")
			}
			t.Log(err)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q: want ErrCorrupt naming %s", err, p)
			}
			after, _ := os.ReadFile(p)
			if len(after) != len(c2.data) {
				t.Errorf("the damaged file was changed: %d bytes, was %d", len(after), len(c2.data))
			}
		})
	}
}

// TestCorruptPagePointer: a branch page whose child points far past the
// end of the file (a flipped high byte). bbolt follows page numbers into
// its memory map unchecked, so the read faults outside the map: a fatal
// error that kills the process (not a panic a recover sees), unless the
// goroutine that reads is set to panic on faults. Open must refuse the
// file with ErrCorrupt and leave it as it is. Seen to fail without that:
// the test binary dies of "unexpected fault address".
func TestCorruptPagePointer(t *testing.T) {
	cfg, data := storeOf20Jobs(t)
	// bbolt's page: id (8 bytes), flags (2), count (2), overflow (4),
	// then a branch page's elements: pos (4), key size (4), page id (8).
	const pageSize, branchFlag, header = 4096, 0x01, 16
	at := -1
	for p := 2 * pageSize; p+header+16 <= len(data); p += pageSize {
		if data[p+8] == branchFlag && data[p+9] == 0 && (data[p+10] != 0 || data[p+11] != 0) {
			at = p + header + 8 // the first element's page id
			break
		}
	}
	if at < 0 {
		t.Fatal("no branch page in the store: write more")
	}
	data[at+3] ^= 0x40 // page 2^30 and more: 4 TB on, far past the map, within bbolt's array
	if err := os.WriteFile(cfg.Path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := Open(cfg, newClock().now)
	if err == nil {
		_ = s.Close()
		t.Fatal("opened a file whose page points past its end")
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), cfg.Path) {
		t.Errorf("error %q: want ErrCorrupt naming %s", err, cfg.Path)
	}
	t.Log(err)
}

func TestOpenLocked(t *testing.T) {
	cfg := testConfig(t)
	cfg.OpenTimeout = 50 * time.Millisecond
	openStore(t, cfg, newClock())
	if s, err := Open(cfg, nil); err == nil {
		_ = s.Close()
		t.Fatal("opened a file another store holds")
	} else if !strings.Contains(err.Error(), "locked") || !strings.Contains(err.Error(), cfg.Path) {
		t.Errorf("error %q", err)
	}
}

func TestCancelStore(t *testing.T) {
	s := openStore(t, testConfig(t), newClock())
	j, _, _ := s.Submit(batchSpec("a", inputs(4, "x")))
	if _, err := s.step(nil, []want{{id: j.ID, n: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.cancel("b", j.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant cancels: %v", err)
	}
	got, err := s.cancel("a", j.ID)
	if err != nil || got.Status() != Cancelled || got.Counts != (Counts{Total: 4, Running: 1, Cancelled: 3}) {
		t.Fatalf("cancel: %+v %v", got.Counts, err)
	}
	// The running item's late requeue becomes cancelled too; completed
	// would stay completed.
	if _, err := s.step([]outcome{{id: j.ID, index: 0, next: Queued}}, nil); err != nil {
		t.Fatal(err)
	}
	again, err := s.cancel("a", j.ID)
	if err != nil || !again.Done() || again.Counts.Cancelled != 4 || again.Finished.IsZero() {
		t.Errorf("after the last item: %+v %v", again, err)
	}
}
