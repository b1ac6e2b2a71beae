//go:build !unix

package server

import "log/slog"

// FaultSignalsEnv is the unix fault knob's variable (cluster_fault_unix.go);
// elsewhere it does nothing.
const FaultSignalsEnv = "BATCHD_FAULT_SIGNALS"

func (dp *dataPlane) faultSignals(*slog.Logger) (stop func()) { return func() {} }
