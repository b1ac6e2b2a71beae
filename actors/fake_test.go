package actors

import (
	"math/rand/v2"
	"time"
)

// fakeCtx is a hand-driven Context for unit tests: the test sets the clock,
// reads what the actor sent, and fires timers and job results itself.
type fakeCtx struct {
	self   Address
	now    time.Duration
	sent   []sent
	timers map[TimerID]timer
	nextID TimerID
	jobs   []Job
	rng    *rand.Rand
}

type sent struct {
	to  Address
	msg Message
}

type timer struct {
	at  time.Duration
	msg Message
}

func newFakeCtx(self Address) *fakeCtx {
	return &fakeCtx{self: self, timers: map[TimerID]timer{}, rng: rand.New(rand.NewPCG(1, 2))}
}

func (c *fakeCtx) Self() Address                { return c.self }
func (c *fakeCtx) Now() time.Duration           { return c.now }
func (c *fakeCtx) Send(to Address, msg Message) { c.sent = append(c.sent, sent{to, msg}) }
func (c *fakeCtx) Cancel(id TimerID)            { delete(c.timers, id) }
func (c *fakeCtx) Rand() *rand.Rand             { return c.rng }
func (c *fakeCtx) Exec(job Job)                 { c.jobs = append(c.jobs, job) }
func (c *fakeCtx) After(d time.Duration, msg Message) TimerID {
	c.nextID++
	c.timers[c.nextID] = timer{c.now + d, msg}
	return c.nextID
}

// take returns and forgets what was sent so far.
func (c *fakeCtx) take() []sent {
	s := c.sent
	c.sent = nil
	return s
}

// advance moves the clock to t, delivering due timers to a in time order.
func (c *fakeCtx) advance(a Actor, t time.Duration) {
	for {
		var next TimerID
		for id, tm := range c.timers {
			if tm.at <= t && (next == 0 || tm.at < c.timers[next].at || (tm.at == c.timers[next].at && id < next)) {
				next = id
			}
		}
		if next == 0 {
			c.now = t
			return
		}
		tm := c.timers[next]
		delete(c.timers, next)
		c.now = tm.at
		a.Receive(c, tm.msg)
	}
}

func replies(s []sent) []Reply {
	var out []Reply
	for _, x := range s {
		if r, ok := x.msg.(Reply); ok {
			out = append(out, r)
		}
	}
	return out
}

func ofType[T any](s []sent) []T {
	var out []T
	for _, x := range s {
		if m, ok := x.msg.(T); ok {
			out = append(out, m)
		}
	}
	return out
}
