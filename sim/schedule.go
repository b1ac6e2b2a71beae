package sim

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// The scheduled faults are the one device model's (actors/fault.go), which
// the live emulated backend runs too; these names keep the simulator's
// configuration reading as it did.
type (
	// FaultKind is what a ScheduledFault does to its device.
	FaultKind = actors.FaultKind
	// ScheduledFault is a fault at a given virtual time on a given device.
	ScheduledFault = actors.ScheduledFault
)

// The kinds of scheduled fault (see actors.FaultCrash and the others).
const (
	FaultCrash = actors.FaultCrash
	FaultHang  = actors.FaultHang
	FaultSlow  = actors.FaultSlow
)

// ScheduledFaultsLimit bounds Config.FaultSchedule.
const ScheduledFaultsLimit = actors.ScheduledFaultsLimit

// LatencySpreadLimit bounds Config.LatencySpread.
const LatencySpreadLimit = actors.LatencySpreadLimit

// validateSchedule checks a fault schedule against a run of the given
// devices and safety phase.
func validateSchedule(s []ScheduledFault, devices int, safety time.Duration) error {
	return actors.ValidateSchedule(s, devices, safety)
}
