package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// timerFD is a timer file descriptor (timerfd_create(2)) in non-blocking
// mode, so that reading it waits in the runtime's network poller, which
// wakes on the timer's expiry rather than at its next millisecond.
type timerFD struct {
	f  *os.File
	fd int // f's descriptor; f.Fd() would make it blocking
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
	return &timerFD{f: os.NewFile(uintptr(fd), "timerfd"), fd: fd}
}

func putTimerFD(tf *timerFD) {
	select {
	case idleTimerFDs <- tf:
	default:
		tf.f.Close()
	}
}

// pollUntil waits until t (never before), or until ctx is done, reading a
// timer fd set to t. The read also has t as its deadline, a Go timer: a
// scheduler that always has goroutines ready to run polls the network
// only now and then, but checks its timers at every switch. Without a
// timer fd it is yieldUntil.
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
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(int64(d))}
	if err := unix.TimerfdSettime(tf.fd, 0, &spec, nil); err != nil {
		tf.f.Close()
		return yieldUntil(ctx, t)
	}
	_ = tf.f.SetReadDeadline(t)
	stop := noStop
	if ctx.Done() != nil { // the timers' waits are never cancelled: no AfterFunc
		stop = context.AfterFunc(ctx, func() { _ = tf.f.SetReadDeadline(time.Unix(1, 0)) })
	}
	var n [8]byte // the expiry count
	_, err := tf.f.Read(n[:])
	stopped := stop()
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

// noStop is the stop of a wait that cannot be cancelled.
func noStop() bool { return true }
