package engine

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// timerFD is a timer file descriptor (timerfd_create(2)) in non-blocking
// mode, so that reading it waits in the runtime's network poller, which
// wakes on the timer's expiry rather than at its next millisecond.
//
// Its two calls a wait, timerfd_settime and the read of the expiry, are
// raw system calls (syscall.RawSyscall): neither can block on a
// non-blocking timer fd, so the runtime need not be told of them (a call
// it is told of, after an idle spell, wakes its monitor thread).
type timerFD struct {
	f  *os.File
	fd int // f's descriptor; f.Fd() would make it blocking
	rc syscall.RawConn
	// deadline: a read deadline is set on f (see deadlines).
	deadline bool
	// spec and buf are the calls' arguments, here so that they are not
	// allocated a wait.
	spec unix.ItimerSpec
	buf  [8]byte // the expiry count
}

// idleTimerFDs keeps timer fds between waits, at most timerFDsMax: one per
// wait would be a descriptor, an epoll registration and a close each time.
var idleTimerFDs = make(chan *timerFD, timerFDsMax)

const timerFDsMax = 64

// noTimerFD makes getTimerFD find none, for tests of the fallback.
var noTimerFD atomic.Bool

func getTimerFD() *timerFD {
	if noTimerFD.Load() {
		return nil
	}
	select {
	case tf := <-idleTimerFDs:
		return tf
	default:
	}
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil // out of descriptors: the caller yields instead
	}
	f := os.NewFile(uintptr(fd), "timerfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil
	}
	return &timerFD{f: f, fd: fd, rc: rc}
}

// set arms the timer fd to expire once, d from now, clearing any expiry
// count not read.
func (tf *timerFD) set(d time.Duration) error {
	tf.spec = unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	_, _, e := syscall.RawSyscall6(unix.SYS_TIMERFD_SETTIME, uintptr(tf.fd), 0,
		uintptr(unsafe.Pointer(&tf.spec)), 0, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// wait waits in the poller until the timer fd's expiry is read, or its
// read deadline passes (os.ErrDeadlineExceeded). It reads before it waits,
// though the fd was just set: the poller's readiness is cleared as a wait
// begins, so an expiry the poller took before then is seen only by that
// read (a wait that skipped it could hang). A readiness left by an earlier
// expiry (see pollUntil) wakes it with nothing to read, and it waits on.
func (tf *timerFD) wait() error {
	var rerr error
	err := tf.rc.Read(func(fd uintptr) bool {
		_, _, e := syscall.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&tf.buf[0])), uintptr(len(tf.buf)))
		switch e {
		case 0:
			return true
		case syscall.EAGAIN, syscall.EINTR:
			return false
		}
		rerr = e
		return true
	})
	if err != nil {
		return err
	}
	return rerr
}

func putTimerFD(tf *timerFD) {
	select {
	case idleTimerFDs <- tf:
	default:
		tf.f.Close()
	}
}

// pollUntil waits until t (never before), or until ctx is done, reading a
// timer fd set to t. While waits wake late (see deadlines), the read also
// has t as its deadline, a Go timer: a scheduler that always has
// goroutines ready to run polls the network only now and then, but checks
// its timers at every switch. Without a timer fd it is yieldUntil.
func pollUntil(ctx context.Context, t time.Time) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sleep: %w", err)
	}
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	tf := getTimerFD()
	if tf == nil {
		return yieldUntil(ctx, t)
	}
	if err := tf.set(d); err != nil {
		tf.f.Close()
		return yieldUntil(ctx, t)
	}
	withDeadline := deadlines.on()
	switch {
	case withDeadline:
		_ = tf.f.SetReadDeadline(t)
		tf.deadline = true
	case tf.deadline:
		_ = tf.f.SetReadDeadline(time.Time{}) // an earlier wait's, past by now
		tf.deadline = false
	}
	stop := noStop
	if ctx.Done() != nil { // the timers' waits are never cancelled: no AfterFunc
		stop = context.AfterFunc(ctx, func() { _ = tf.f.SetReadDeadline(time.Unix(1, 0)) })
	}
	err := tf.wait()
	stopped := stop()
	if stopped && ctx.Err() == nil {
		deadlines.woke(withDeadline, time.Since(t))
	}
	switch {
	case stopped && err == nil:
		putTimerFD(tf)
		return nil
	case stopped && errors.Is(err, os.ErrDeadlineExceeded):
		// The deadline came first, as it often does (both are due at t):
		// the fd is kept all the same. Its expiry, if still to come, is
		// harmless to the next wait: timerfd_settime clears the count,
		// and a stale readiness costs that wait one more read.
		putTimerFD(tf)
		return yieldUntil(ctx, t)
	}
	// Cancelled (the cancel may yet move the deadline), or a read that
	// failed otherwise: not kept for another wait. yieldUntil answers
	// ctx's error, or returns at once once t has passed, or waits out
	// what a failed read left.
	tf.f.Close()
	return yieldUntil(ctx, t)
}

// deadlines decides whether a timer fd's wait also has a read deadline.
//
// A deadline is a Go timer, and on a process idle between batches each
// runtime timer costs wake-ups of its own: the runtime's monitor thread
// (sysmon), asleep while no goroutine runs, sleeps only until the next
// timer. There the timer fd wakes the wait on time without it: a server
// under 2,000 req/s with a 5 ms backend, pinned to one core, spent 8%
// less CPU a request with no deadline at all (cpu-per-request.sh, 8
// rounds). Where the CPU is saturated, the poller is looked at only now
// and then and a timer fd's wake-up can come late, while timers are
// checked at every goroutine switch: there the deadline is what keeps
// waits on time.
//
// So waits go without a deadline until latesOn of the last 32 woke more
// than lateMax late (one alone is as often the machine's other work
// taking the CPU, which no deadline helps), and then with one until
// deadlinesOff waits in a row have woken within lateMax.
var deadlines lateness

// lateness is the state behind deadlines; its zero value waits without.
type lateness struct {
	set atomic.Bool
	// recent has a bit for each of the last 32 waits without a deadline,
	// the newest lowest: set when it woke late.
	recent atomic.Uint32
	// onTime counts, while deadlines are set, the waits in a row that woke
	// within lateMax.
	onTime atomic.Int64
}

const (
	// lateMax is how late a wait may wake and be on time: well above the
	// 0.04-0.15 ms a timer fd wakes late on an idle machine, and above the
	// 0.25-0.6 ms (p90) of a saturated one's deadlines. At 250 µs, the
	// other work on a shared 2-core machine set deadlines for much of a
	// 2,000 req/s run, and the CPU saved was lost (B/A 1.026 against
	// 0.953 at 1 ms, cpu-per-request.sh).
	lateMax = time.Millisecond
	// latesOn is how many of the last 32 waits without a deadline must
	// have woken late for deadlines to be set.
	latesOn = 3
	// deadlinesOff is how many waits in a row must wake within lateMax
	// before deadlines are dropped again.
	deadlinesOff = 256
)

// on reports whether the next wait has a deadline.
func (l *lateness) on() bool { return l.set.Load() }

// woke records how late a wait woke, and whether it had a deadline.
func (l *lateness) woke(withDeadline bool, late time.Duration) {
	isLate := late > lateMax
	switch {
	case !withDeadline:
		var bit uint32
		if isLate {
			bit = 1
		}
		for {
			old := l.recent.Load()
			next := old<<1 | bit
			if !l.recent.CompareAndSwap(old, next) {
				continue
			}
			if bits.OnesCount32(next) >= latesOn {
				l.recent.Store(0)
				l.onTime.Store(0)
				l.set.Store(true)
			}
			return
		}
	case isLate:
		l.onTime.Store(0)
	case l.onTime.Add(1) >= deadlinesOff:
		l.onTime.Store(0)
		l.set.Store(false)
	}
}

// noStop is the stop of a wait that cannot be cancelled.
func noStop() bool { return true }
