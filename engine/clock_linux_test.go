package engine

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// processCPU is the process's CPU time so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Without a timer fd (none could be made), preciseUntil yields instead:
// still never early, and still cancelled with ctx.
func TestPreciseUntilWithoutTimerFD(t *testing.T) {
	noTimerFD.Store(true)
	defer noTimerFD.Store(false)
	due := time.Now().Add(3 * time.Millisecond)
	if err := preciseUntil(context.Background(), due); err != nil {
		t.Fatal(err)
	}
	if time.Now().Before(due) {
		t.Error("preciseUntil returned early without a timer fd")
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Millisecond, cancel)
	if err := preciseUntil(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Fatalf("preciseUntil cancelled without a timer fd: %v, want context.Canceled", err)
	}
}

// A timer fd goes back to the pool even when its wait ended another way
// than by reading its expiry (the read deadline came first), so it may
// come back with an expiry no one read and a readiness the poller saw.
// The next wait on it must still wait its whole time: timerfd_settime
// clears the count, and a stale readiness only costs a second read.
func TestPollUntilReusesAnExpiredTimerFD(t *testing.T) {
	for drained := false; !drained; {
		select {
		case tf := <-idleTimerFDs:
			tf.f.Close()
		default:
			drained = true
		}
	}
	tf := getTimerFD()
	if tf == nil {
		t.Skip("no timer fd on this machine")
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(time.Microsecond))}
	if err := unix.TimerfdSettime(tf.fd, 0, &spec, nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // expired, unread; the poller has looked
	putTimerFD(tf)
	for range 3 {
		due := time.Now().Add(3 * time.Millisecond)
		if err := pollUntil(context.Background(), due); err != nil {
			t.Fatal(err)
		}
		if early := due.Sub(time.Now()); early > 0 {
			t.Fatalf("pollUntil on a reused timer fd returned %v early", early)
		}
	}
	select {
	case got := <-idleTimerFDs:
		if got != tf {
			t.Error("the reused timer fd was not the one put back")
		}
		putTimerFD(got)
	default:
		t.Error("the timer fd was not kept after its waits")
	}
}

// Waits go without a read deadline until latesOn of the last 32 woke
// late; then with one until deadlinesOff waits in a row woke on time; a
// late one among them starts the count again.
func TestDeadlinesFollowLateness(t *testing.T) {
	var l lateness
	if l.on() {
		t.Fatal("deadlines on before any wait")
	}
	for range 100 {
		l.woke(false, lateMax)
	}
	if l.on() {
		t.Fatal("deadlines on after waits within lateMax")
	}
	for range latesOn - 1 {
		l.woke(false, lateMax+time.Microsecond)
		for range 31 - latesOn {
			l.woke(false, 0)
		}
	}
	if l.on() {
		t.Fatalf("deadlines on after %d late waits in 32", latesOn-1)
	}
	for range 32 - latesOn {
		l.woke(false, 0) // the late ones are out of the last 32
	}
	for range latesOn - 1 {
		l.woke(false, 2*lateMax)
	}
	if l.on() {
		t.Fatalf("deadlines on after %d late waits in 32", latesOn-1)
	}
	l.woke(false, 2*lateMax)
	if !l.on() {
		t.Fatalf("deadlines still off after %d late waits in a row", latesOn)
	}
	for range deadlinesOff - 1 {
		l.woke(true, 0)
	}
	l.woke(true, 2*lateMax) // late: the count starts again
	for range deadlinesOff - 1 {
		l.woke(true, 0)
	}
	if !l.on() {
		t.Fatal("deadlines off before deadlinesOff waits in a row woke on time")
	}
	l.woke(true, 0)
	if l.on() {
		t.Fatalf("deadlines still on after %d waits in a row woke on time", deadlinesOff)
	}
	for range latesOn - 1 {
		l.woke(false, 2*lateMax)
	}
	if l.on() {
		t.Fatal("deadlines on again at once: the late waits before them still counted")
	}
}

// A wait whose timer fd was left with a read deadline by an earlier wait
// (one under deadlines) and is taken by a wait without one must still
// wait its whole time: the old deadline, past by then, is cleared.
func TestPollUntilClearsAnOldDeadline(t *testing.T) {
	for drained := false; !drained; {
		select {
		case tf := <-idleTimerFDs:
			tf.f.Close()
		default:
			drained = true
		}
	}
	defer deadlines.set.Store(false)
	deadlines.set.Store(true)
	if err := pollUntil(context.Background(), time.Now().Add(time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	deadlines.set.Store(false)
	due := time.Now().Add(3 * time.Millisecond)
	if err := pollUntil(context.Background(), due); err != nil {
		t.Fatal(err)
	}
	if early := due.Sub(time.Now()); early > 0 {
		t.Fatalf("pollUntil returned %v early on a timer fd with an old deadline", early)
	}
	select {
	case tf := <-idleTimerFDs:
		defer putTimerFD(tf)
		if err := tf.set(time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if err := tf.wait(); err != nil {
			t.Fatalf("a wait on the timer fd after one without a deadline: %v, want its expiry", err)
		}
	default:
		t.Fatal("the timer fd was not kept after its waits")
	}
}

// A timer fd that expired, and whose readiness the poller took, before its
// wait began must still be read by that wait: the poller's readiness is
// cleared as the wait starts, and no second one comes. (A wait that
// skipped its first read hung there; this wait has a deadline 2 s out to
// say so rather than hang.)
func TestTimerFDWaitAfterItsExpiry(t *testing.T) {
	tf := getTimerFD()
	if tf == nil {
		t.Skip("no timer fd on this machine")
	}
	defer tf.f.Close()
	if err := tf.set(time.Microsecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // expired; the poller has looked
	_ = tf.f.SetReadDeadline(time.Now().Add(2 * time.Second))
	if err := tf.wait(); err != nil {
		t.Fatalf("a wait begun after the expiry: %v, want the expiry read", err)
	}
}
