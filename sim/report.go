package sim

import "github.com/batchd/batchd/sim/ledger"

// A run's report and the ledger it is read from live in package
// sim/ledger; these names are the report's types as sim's callers have
// always named them.
type (
	Report          = ledger.Report
	NameStats       = ledger.NameStats
	Percentiles     = ledger.Percentiles
	RequestCounts   = ledger.RequestCounts
	AutoscaleSample = ledger.AutoscaleSample
	ScalingReport   = ledger.ScalingReport
)

// OtherName is the name the per-tenant and per-model figures use for the
// tenants past the ledger's bound (ledger.OtherName).
const OtherName = ledger.OtherName

// ErrViolations is returned by Report.Check for a report that broke an
// invariant (ledger.ErrViolations).
var ErrViolations = ledger.ErrViolations
