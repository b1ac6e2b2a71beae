package actors

import (
	"math/rand/v2"
	"testing"
	"time"
)

// nullCtx is the cheapest Context: it counts sends and drops them, so a
// benchmark measures the actor's own step and the boxing of its messages.
type nullCtx struct {
	now   time.Duration
	sends int
	rng   *rand.Rand
}

func (c *nullCtx) Self() Address                        { return batcherAddr }
func (c *nullCtx) Now() time.Duration                   { return c.now }
func (c *nullCtx) Send(Address, Message)                { c.sends++ }
func (c *nullCtx) After(time.Duration, Message) TimerID { return 1 }
func (c *nullCtx) Cancel(TimerID)                       {}
func (c *nullCtx) Rand() *rand.Rand                     { return c.rng }
func (c *nullCtx) Exec(Job)                             {}

// BenchmarkBatcherStep is the cost of one batcher step on the reference
// path: a Submit admitted into a key queue, and every 100th step a full
// batch dispatched and settled by the device's BatchDone (so one op is one
// request's share of the batcher's work).
func BenchmarkBatcherStep(b *testing.B) {
	bt, err := NewBatcher(DefaultBatcherConfig())
	if err != nil {
		b.Fatal(err)
	}
	c := &nullCtx{}
	dev := Address{ID: 100}
	bt.Receive(c, DeviceReady{Device: dev, Incarnation: 1})
	req := Request{Model: "m", Version: "v1", Input: "0123456789abcdef0123456789abcdef", ReplyTo: Address{ID: 2}}
	b.ReportAllocs()
	var id uint64
	for b.Loop() {
		id++
		req.ID, req.Arrival = id, c.now
		bt.Receive(c, Submit{Req: req})
		if id%100 == 0 { // the batch is full and went out
			bt.Receive(c, BatchDone{Device: dev, BatchID: bt.batchSeq})
		}
		c.now += 10 * time.Microsecond
	}
	if s := bt.Stats(); s.Rejected != 0 {
		b.Fatalf("rejected %d requests: the benchmark measured the wrong path", s.Rejected)
	}
}

// BenchmarkDeviceBatch is the cost of a device running one batch of 17
// (the reference workload's mean): RunBatch, the job's result, 17 replies
// and a BatchDone.
func BenchmarkDeviceBatch(b *testing.B) {
	d, err := NewDevice(DefaultDeviceConfig(), batcherAddr)
	if err != nil {
		b.Fatal(err)
	}
	c := &nullCtx{}
	d.Receive(c, Start{})
	batch := testBatch(1, "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p", "q")
	outs := make([]string, len(batch.Items))
	b.ReportAllocs()
	for b.Loop() {
		d.Receive(c, RunBatch{Batch: batch})
		d.Receive(c, JobDone{ID: d.job, Outputs: outs})
	}
	if d.phase != deviceIdle {
		b.Fatal("device did not finish its batches")
	}
}
