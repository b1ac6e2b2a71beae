package record_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/enginetest"
	"github.com/batchd/batchd/engine/record"
)

// fakeDoer answers from a function, on a clock the test moves.
type fakeDoer struct {
	mu  sync.Mutex
	now time.Duration
	do  func(req actors.Request, now time.Duration) (actors.Reply, error)
}

func (f *fakeDoer) Now() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fakeDoer) set(t time.Duration) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

func (f *fakeDoer) Do(_ context.Context, req actors.Request) (actors.Reply, error) {
	return f.do(req, f.Now())
}

// closeBuffer is a bytes.Buffer that records being closed.
type closeBuffer struct {
	bytes.Buffer
	closed int
}

func (c *closeBuffer) Close() error { c.closed++; return nil }

func readLines(t *testing.T, data []byte) []record.Entry {
	t.Helper()
	var out []record.Entry
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var e record.Entry
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&e); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	return out
}

// TestRecorderLines: each request becomes one line with its arrival
// relative to the start, its attributes, its outcome and timeline; the
// input text only when asked; an engine error is recorded as such; the
// reply passes through unchanged; Close flushes and closes once.
func TestRecorderLines(t *testing.T) {
	wall := time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)
	f := &fakeDoer{now: 10 * time.Second}
	f.do = func(req actors.Request, now time.Duration) (actors.Reply, error) {
		switch req.Input {
		case "busy":
			return actors.Reply{Outcome: actors.Rejected, Reason: actors.ReasonOverloaded, Arrival: now}, nil
		case "gone":
			return actors.Reply{}, context.Canceled
		}
		return actors.Reply{
			Outcome: actors.Completed, Output: "out", Version: "v2",
			Arrival: now, Enqueue: now, Dispatch: now + 30*time.Millisecond, Done: now + 130*time.Millisecond,
			BatchSize: 7, Attempts: 1,
		}, nil
	}
	for _, inputs := range []bool{false, true} {
		f.set(10 * time.Second)
		out := &closeBuffer{}
		rec, err := record.New(enginetest.Door(f), out, record.Config{Inputs: inputs, WallNow: func() time.Time { return wall }})
		if err != nil {
			t.Fatal(err)
		}
		f.set(10*time.Second + 1500*time.Millisecond)
		rep, err := rec.Do(context.Background(), actors.Request{Tenant: "a", Model: "m", Input: "hello",
			Priority: 1, Params: `{"k":1}`, Deadline: f.Now() + 250*time.Millisecond})
		if err != nil || rep.Output != "out" || rep.BatchSize != 7 {
			t.Fatalf("reply changed on the way: %+v, %v", rep, err)
		}
		f.set(12 * time.Second)
		if _, err := rec.Do(context.Background(), actors.Request{Tenant: "b", Model: "m", Version: "v1", Input: "busy"}); err != nil {
			t.Fatal(err)
		}
		if _, err := rec.Do(context.Background(), actors.Request{Tenant: "b", Model: "m", Input: "gone"}); !errors.Is(err, context.Canceled) {
			t.Fatalf("error not passed through: %v", err)
		}
		if out.Len() != 0 {
			t.Errorf("%d bytes written before Close: the lines should be buffered", out.Len())
		}
		if err := rec.Close(); err != nil {
			t.Fatal(err)
		}
		if err := rec.Close(); err != nil || out.closed != 1 {
			t.Fatalf("second Close: %v, closed %d times", err, out.closed)
		}
		lines := readLines(t, out.Bytes())
		if len(lines) != 3 {
			t.Fatalf("%d lines, want 3:\n%s", len(lines), out.String())
		}
		c, r, g := lines[0], lines[1], lines[2]
		if c.ArrivalS != 1.5 || !c.Time.Equal(wall) || c.Tenant != "a" || c.Model != "m" || c.Version != "v2" ||
			c.Params != `{"k":1}` || c.Priority != 1 || c.TimeoutMs != 250 || c.InputLen != 5 ||
			c.Outcome != "completed" || c.LatencyMs != 130 || c.QueueMs != 30 || c.ComputeMs != 100 ||
			c.BatchSize != 7 || c.Attempts != 1 {
			t.Errorf("completed line: %+v", c)
		}
		if inputs != (c.Input == "hello") {
			t.Errorf("Inputs %v: input recorded as %q", inputs, c.Input)
		}
		if !inputs && strings.Contains(out.String(), "hello") {
			t.Errorf("input text in the file without Inputs:\n%s", out.String())
		}
		if r.ArrivalS != 2 || r.Outcome != "rejected" || r.Reason != "overloaded" || r.Version != "v1" || r.TimeoutMs != 0 {
			t.Errorf("rejected line: %+v", r)
		}
		if g.Outcome != record.OutcomeError || g.Error != context.Canceled.Error() || g.InputLen != 4 {
			t.Errorf("error line: %+v", g)
		}
		if s := rec.Stats(); s.Lines != 3 || s.Skipped != 0 || s.Bytes != int64(out.Len()) {
			t.Errorf("stats %+v for %d bytes", s, out.Len())
		}
	}
}

// TestRecorderBound: the recording stops before the line that would cross
// BytesMax, requests are still served, and the skipped ones are counted;
// requests after Close are served and not recorded.
func TestRecorderBound(t *testing.T) {
	f := &fakeDoer{do: func(req actors.Request, now time.Duration) (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Completed, Output: req.Input, Arrival: now, Done: now}, nil
	}}
	var out bytes.Buffer
	// Measure one line, then allow two and a half. A fixed wall clock
	// keeps every line the same length.
	wall := func() time.Time { return time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC) }
	probe, _ := record.New(enginetest.Door(f), &out, record.Config{WallNow: wall})
	probe.Do(context.Background(), actors.Request{Tenant: "t", Model: "m", Input: "x"})
	probe.Close()
	lineLen := int64(out.Len())
	out.Reset()

	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	rec, err := record.New(enginetest.Door(f), &out, record.Config{BytesMax: 2*lineLen + lineLen/2, WallNow: wall, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		rep, err := rec.Do(context.Background(), actors.Request{Tenant: "t", Model: "m", Input: "x"})
		if err != nil || rep.Output != "x" {
			t.Fatalf("request %d not served past the bound: %+v %v", i, rep, err)
		}
	}
	if s := rec.Stats(); s.Lines != 2 || s.Skipped != 3 || !s.Full || s.Bytes != 2*lineLen {
		t.Errorf("stats %+v, want 2 lines of %d bytes, 3 skipped, full", s, lineLen)
	}
	if n := strings.Count(logged.String(), "size bound reached"); n != 1 || !strings.Contains(logged.String(), "level=WARN") {
		t.Errorf("want one warning, logged:\n%s", logged.String())
	}
	rec.Close()
	if _, err := rec.Do(context.Background(), actors.Request{Tenant: "t", Model: "m", Input: "x"}); err != nil {
		t.Fatal(err)
	}
	if got := len(readLines(t, out.Bytes())); got != 2 || rec.Stats().Skipped != 4 {
		t.Errorf("%d lines in the file, %d skipped; want 2 and 4", got, rec.Stats().Skipped)
	}
	if _, err := record.New(enginetest.Door(f), &out, record.Config{BytesMax: -1}); err == nil {
		t.Error("negative BytesMax accepted")
	}
}

// failWriter fails every write.
type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// TestRecorderWriteError: a failing file stops the recording, not the
// serving, and Close reports the error.
func TestRecorderWriteError(t *testing.T) {
	f := &fakeDoer{do: func(req actors.Request, now time.Duration) (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Completed, Arrival: now, Done: now}, nil
	}}
	rec, _ := record.New(enginetest.Door(f), failWriter{}, record.Config{})
	for range 3 {
		if _, err := rec.Do(context.Background(), actors.Request{Model: "m", Input: "x"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close: %v, want the write error", err)
	}
}

// TestRecorderSubmit: a request through Submit is recorded before its done
// is called, with the same line Do would write; one Cancel withdraws is
// recorded as an error (its done is never called); one answered first is
// not withdrawn and recorded once.
func TestRecorderSubmit(t *testing.T) {
	release := make(chan struct{})
	f := &fakeDoer{now: 3 * time.Second}
	f.do = func(req actors.Request, now time.Duration) (actors.Reply, error) {
		return actors.Reply{Outcome: actors.Completed, Output: req.Input, Arrival: now, Done: now + time.Millisecond, BatchSize: 1}, nil
	}
	slow := &blockingDoer{fakeDoer: f, release: release}
	var out bytes.Buffer
	rec, err := record.New(enginetest.Door(slow), &out, record.Config{})
	if err != nil {
		t.Fatal(err)
	}
	answered := make(chan actors.Reply, 1)
	rec.Submit(actors.Request{Tenant: "a", Model: "m", Input: "quick"}, func(rep actors.Reply, err error) {
		if err != nil {
			t.Errorf("quick: %v", err)
		}
		if s := rec.Stats(); s.Lines != 1 {
			t.Errorf("done called with %d lines recorded, want the request's own first", s.Lines)
		}
		answered <- rep
	})
	if rep := <-answered; rep.Output != "quick" {
		t.Fatalf("reply changed on the way: %+v", rep)
	}
	id := rec.Submit(actors.Request{Tenant: "b", Model: "m", Input: "block"}, func(actors.Reply, error) {
		t.Error("done called for a withdrawn request")
	})
	if !rec.Cancel(id) {
		t.Fatal("Cancel of a request in flight: not withdrawn")
	}
	if rec.Cancel(id) {
		t.Error("second Cancel: withdrawn twice")
	}
	close(release)
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, out.Bytes())
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), out.String())
	}
	if q := lines[0]; q.Tenant != "a" || q.Outcome != "completed" || q.LatencyMs != 1 || q.BatchSize != 1 {
		t.Errorf("submitted line: %+v", q)
	}
	if b := lines[1]; b.Tenant != "b" || b.Outcome != record.OutcomeError || b.Error != context.Canceled.Error() || b.InputLen != 5 {
		t.Errorf("withdrawn line: %+v", b)
	}
}

// blockingDoer holds the requests whose input is "block" until release is
// closed or their ctx ends.
type blockingDoer struct {
	*fakeDoer
	release chan struct{}
}

func (b *blockingDoer) Do(ctx context.Context, req actors.Request) (actors.Reply, error) {
	if req.Input == "block" {
		select {
		case <-b.release:
		case <-ctx.Done():
			return actors.Reply{}, ctx.Err()
		}
	}
	return b.fakeDoer.Do(ctx, req)
}
