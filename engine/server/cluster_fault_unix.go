//go:build unix

package server

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// FaultSignalsEnv, set to 1 in a node's environment, makes the node's data
// plane a fault knob for tests on one machine, where loopback cannot be
// cut: SIGUSR1 partitions it from every other node (transport.Cut),
// SIGUSR2 heals it. Membership is not cut.
const FaultSignalsEnv = "BATCHD_FAULT_SIGNALS"

// faultSignals starts the knob when FaultSignalsEnv asks for it; stop ends
// it.
func (dp *dataPlane) faultSignals(log *slog.Logger) (stop func()) {
	if os.Getenv(FaultSignalsEnv) != "1" {
		return func() {}
	}
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGUSR1, syscall.SIGUSR2)
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-done:
				return
			case sig := <-ch:
				cut := sig == syscall.SIGUSR1
				dp.tr.Cut(cut)
				log.Warn("cluster: fault knob: data plane", "partitioned", cut)
			}
		}
	}()
	log.Warn("cluster: fault knob on: SIGUSR1 partitions the data plane, SIGUSR2 heals it", "env", FaultSignalsEnv)
	return func() {
		signal.Stop(ch)
		close(done)
		<-ended
	}
}
