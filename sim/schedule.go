package sim

import (
	"time"

	"github.com/batchd/batchd/actors/devicemodel"
)

// The scheduled faults are the one device model's (actors/devicemodel), which
// the live emulated backend runs too; these names keep the simulator's
// configuration reading as it did.
type (
	// FaultKind is what a ScheduledFault does to its device.
	FaultKind = devicemodel.FaultKind
	// ScheduledFault is a fault at a given virtual time on a given device.
	ScheduledFault = devicemodel.ScheduledFault
)

// The kinds of scheduled fault (see devicemodel.FaultCrash and the others).
const (
	FaultCrash = devicemodel.FaultCrash
	FaultHang  = devicemodel.FaultHang
	FaultSlow  = devicemodel.FaultSlow
)

// ScheduledFaultsLimit bounds Config.FaultSchedule.
const ScheduledFaultsLimit = devicemodel.ScheduledFaultsLimit

// LatencySpreadLimit bounds Config.LatencySpread.
const LatencySpreadLimit = devicemodel.LatencySpreadLimit

// validateSchedule checks a fault schedule against a run of the given
// devices and safety phase.
func validateSchedule(s []ScheduledFault, devices int, safety time.Duration) error {
	return devicemodel.ValidateSchedule(s, devices, safety)
}
