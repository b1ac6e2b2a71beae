//go:build !hollywood

package engine

import (
	"sync"
	"testing"
)

// TestDispatcher: runs go to the dispatcher's goroutine one at a time; a
// run scheduled while another waits, and any run after stop, still runs
// (on a goroutine of its own); stop ends the dispatcher's goroutine.
func TestDispatcher(t *testing.T) {
	var wg sync.WaitGroup
	d := newDispatcher(&wg, "test")
	ran := make(chan string, 4)
	release := make(chan struct{})
	d.Schedule(func() { ran <- "first"; <-release })
	if got := <-ran; got != "first" {
		t.Fatalf("ran %q, want first", got)
	}
	// The goroutine is busy with the first run: the second waits in the
	// slot, the third finds it taken and runs on its own goroutine.
	d.Schedule(func() { ran <- "second" })
	d.Schedule(func() { ran <- "third" })
	if got := <-ran; got != "third" {
		t.Fatalf("ran %q while the first run held the goroutine, want third", got)
	}
	close(release)
	if got := <-ran; got != "second" {
		t.Fatalf("ran %q after the first run, want second", got)
	}
	d.stop()
	d.stop()  // a second stop is harmless
	wg.Wait() // returns only once the goroutine has ended
	d.Schedule(func() { ran <- "after stop" })
	if got := <-ran; got != "after stop" {
		t.Fatalf("ran %q, want the run scheduled after stop", got)
	}
}
