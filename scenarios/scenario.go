package scenarios

import (
	"time"

	"github.com/batchd/batchd/actors"
)

// Scenario is one scenario file. Durations are written as Go durations
// ("100ms", "1m30s"). A key the file leaves out keeps the default its
// field's comment gives; a key the schema does not know is an error.
type Scenario struct {
	// Name identifies the scenario in reports and failure messages:
	// lowercase letters, digits and dashes.
	Name string `yaml:"name"`
	// Description says what the scenario shows, for the report's reader.
	Description string `yaml:"description"`
	// Long marks a scenario that takes long to simulate (a simulated
	// hour): `go test` skips it unless run with -scenarios.long.
	Long bool `yaml:"long"`
	// Seed is the master seed `batchd sim` uses unless --seed says
	// otherwise. Default 1.
	Seed uint64 `yaml:"seed"`
	// Duration is the safety phase: traffic arrives and faults strike in
	// it. Default: the end of the last traffic phase.
	Duration time.Duration `yaml:"duration"`
	// DrainMax bounds the liveness phase after it, in which everything
	// accepted must drain. Default 5m.
	DrainMax time.Duration `yaml:"drain_max"`
	// NetDelay is the delivery delay of every message between actors.
	// Default 0 (one process).
	NetDelay time.Duration `yaml:"net_delay"`
	// SampleEvery is the step of the autoscaling readings and of the
	// report's timeline. Default 1s.
	SampleEvery time.Duration `yaml:"sample_every"`

	// Nodes group the devices; at least one. The simulator runs one
	// batcher over the devices of all nodes, numbered node after node.
	Nodes []Node `yaml:"nodes"`
	// Devices describes every device: latency model and supervision.
	Devices Devices `yaml:"devices"`
	// Models is the batcher's registry. Empty serves any model name and
	// takes a request's version as given.
	Models []Model `yaml:"models"`
	// Tenants are the tenants with their weights and limits. When any is
	// listed, traffic may only name listed tenants (a typo is an error,
	// not a new tenant).
	Tenants []Tenant `yaml:"tenants"`
	// Traffic is the list of phases; at least one.
	Traffic []Phase `yaml:"traffic"`
	// Faults are the device faults, at rates and at given times.
	Faults Faults `yaml:"faults"`
	// Policy is the batcher's policy.
	Policy Policy `yaml:"policy"`
	// Windows are increasing times that split the report by arrival time
	// (per tenant), for expectations scoped to a window. Default: 0, every
	// phase's start and end, and Duration.
	Windows []time.Duration `yaml:"windows"`
	// Expect lists what must hold, one check a line (see Check):
	// "p95_ms < 200", "tenant:a slo_attainment >= 0.99", "lost == 0".
	Expect []string `yaml:"expect"`

	// Filled in by the loader.
	file    string
	latency actors.LatencyModel
	checks  []Check
	lines   map[string]int
}

// Node is a group of devices.
type Node struct {
	Name string `yaml:"name"`
	// Devices is the number of devices on the node, 1 or more.
	Devices int `yaml:"devices"`
	// Models are the models the node's devices hold warm; empty means
	// any. Each must be in the registry when one is given.
	Models []string `yaml:"models"`
}

// Devices describes the emulated devices.
type Devices struct {
	// Latency is the batch cost model the devices run and the batcher
	// plans with. Default: fixed 100ms, the seeds' backend.
	Latency Latency `yaml:"latency"`
	// LatencySpread is the σ of a log-normal factor of mean 1 on each
	// batch's true cost (0 to 2): a backend whose latency varies a lot
	// while the batcher plans with its mean. Default 0.
	LatencySpread float64 `yaml:"latency_spread"`
	// WatchdogMultiple: a batch still running after this multiple of its
	// predicted latency is declared hung. Default 3.
	WatchdogMultiple int `yaml:"watchdog_multiple"`
	// RestartBackoff and RestartBackoffMax: the wait before a failed
	// device restarts, doubling per consecutive failure. Defaults 100ms
	// and 5s.
	RestartBackoff    time.Duration `yaml:"restart_backoff"`
	RestartBackoffMax time.Duration `yaml:"restart_backoff_max"`
	// QuarantineAfter consecutive failures take a device out for
	// QuarantineFor. Defaults 5 and 30s.
	QuarantineAfter int           `yaml:"quarantine_after"`
	QuarantineFor   time.Duration `yaml:"quarantine_for"`
}

// Latency is a batch cost model: fixed, affine (base + per_item × size),
// or a measured profile file, each optionally plus per_padded_byte × size
// × the longest input. Exactly one of fixed, base/per_item and profile.
type Latency struct {
	Fixed         time.Duration `yaml:"fixed"`
	Base          time.Duration `yaml:"base"`
	PerItem       time.Duration `yaml:"per_item"`
	PerPaddedByte time.Duration `yaml:"per_padded_byte"`
	// Profile is a file of "batch_size,latency" lines (see
	// actors.ParseLatencyTable), relative to the scenario file.
	Profile string `yaml:"profile"`
}

// Model is one model of the registry.
type Model struct {
	Name string `yaml:"name"`
	// Versions and their routing weights (a canary: v1 95, v2 5). Default:
	// one version, v1, weight 1.
	Versions []Version `yaml:"versions"`
	// BatchMax, InputLenMax and SLO, when positive, replace the policy's
	// for this model.
	BatchMax    int           `yaml:"batch_max"`
	InputLenMax int           `yaml:"input_len_max"`
	SLO         time.Duration `yaml:"slo"`
	// BucketEdges are increasing input lengths in bytes that split the
	// model's queue by input length.
	BucketEdges []int `yaml:"bucket_edges"`
}

// Version is one version of a model.
type Version struct {
	Name string `yaml:"name"`
	// Weight routes requests that name no version; 0 serves only requests
	// that pin it. Default 1.
	Weight int `yaml:"weight"`
}

// Tenant is one tenant's share, quotas and priority.
type Tenant struct {
	Name string `yaml:"name"`
	// Weight is the tenant's share of device time against other
	// backlogged tenants. Default 1.
	Weight int `yaml:"weight"`
	// Rate (requests per second) and Burst form a token bucket (429
	// beyond); Rate 0 is no limit.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// InFlightMax caps the tenant's requests queued or running; 0 is none.
	InFlightMax int `yaml:"in_flight_max"`
	// Priority of all the tenant's requests: low, normal (the default) or
	// high.
	Priority string `yaml:"priority"`
}

// Phase is one stretch of traffic. Phases run one after another unless a
// phase gives its own start, so that a burst can overlap a steady load.
type Phase struct {
	// Name labels the phase in errors. Optional.
	Name string `yaml:"name"`
	// Start is when the phase begins. Default: when the previous phase
	// ends (0 for the first).
	Start *time.Duration `yaml:"start"`
	// Duration is how long the phase lasts; required.
	Duration time.Duration `yaml:"duration"`
	// Rate is the phase's requests per second, over all its tenants (for
	// diurnal, the peak of the curve).
	Rate float64 `yaml:"rate"`
	// Arrival is the arrival process: poisson (default), constant, diurnal
	// (Poisson with the rate following Curve over the phase) or burst
	// (groups of BurstSize requests at once, Poisson between groups).
	Arrival string `yaml:"arrival"`
	// Curve is a diurnal phase's rate as multiples of Rate in [0, 1],
	// evenly spaced over the phase. Default: sim.DiurnalCurve, a day in
	// 24 hourly points.
	Curve []float64 `yaml:"curve"`
	// BurstSize is the requests per group of a burst phase.
	BurstSize int `yaml:"burst_size"`
	// Tenants maps each tenant of the phase to its share of Rate.
	// Default: one tenant, t.
	Tenants map[string]float64 `yaml:"tenants"`
	// Models is the mix of model versions. Default: every registry model
	// at weight 1 with its version routed, or model m version v1 without
	// a registry.
	Models []Mix `yaml:"models"`
	// InputLen bounds each input's length in bytes, drawn uniformly.
	// Default 16 to 64.
	InputLen InputLen `yaml:"input_len"`
	// Timeout is each request's own deadline after arrival; 0 uses the
	// SLO.
	Timeout time.Duration `yaml:"timeout"`
	// CancelRate is the probability that a client withdraws a request
	// CancelAfter its arrival.
	CancelRate  float64       `yaml:"cancel_rate"`
	CancelAfter time.Duration `yaml:"cancel_after"`
	// Params are the computation parameters: requests with different
	// params never share a batch.
	Params string `yaml:"params"`
	// Poison makes a share of the phase's requests poison inputs, which
	// fail every batch that holds one. None by default.
	Poison *Poison `yaml:"poison"`
}

// Poison is a phase's poison traffic (sim.TrafficConfig.PoisonShare): a
// share of the requests of each of its tenants carries one of Inputs
// distinct inputs, faults.poison_prefix (required) followed by a number.
type Poison struct {
	// Share of the phase's requests, in (0, 1].
	Share float64 `yaml:"share"`
	// Inputs is the number of distinct poison inputs. Default 1.
	Inputs int `yaml:"inputs"`
}

// Mix is one model version in a phase's traffic.
type Mix struct {
	Model string `yaml:"model"`
	// Version pins the version; empty lets the registry's weights route.
	Version string `yaml:"version"`
	// Weight is the entry's share of the phase's requests. Default 1.
	Weight float64 `yaml:"weight"`
}

// InputLen bounds input lengths in bytes.
type InputLen struct {
	Min int `yaml:"min"`
	Max int `yaml:"max"`
}

// Faults are device faults at rates (probabilities per batch, see
// sim.FaultPlan) and at given times (Schedule).
type Faults struct {
	CrashRate      float64 `yaml:"crash_rate"`
	HangRate       float64 `yaml:"hang_rate"`
	SlowRate       float64 `yaml:"slow_rate"`
	SlowFactor     float64 `yaml:"slow_factor"`
	BatchErrorRate float64 `yaml:"batch_error_rate"`
	ItemErrorRate  float64 `yaml:"item_error_rate"`
	PoisonPrefix   string  `yaml:"poison_prefix"`
	// HealAt ends the faults at rates. Default: Duration.
	HealAt time.Duration `yaml:"heal_at"`
	// HealthyDevices, counted from the last device, get no faults at
	// rates.
	HealthyDevices int `yaml:"healthy_devices"`
	// Schedule are faults at given times on given devices.
	Schedule []Fault `yaml:"schedule"`
}

// Fault is one fault at a given time.
type Fault struct {
	At time.Duration `yaml:"at"`
	// Kind is crash (mid-batch), hang or slow.
	Kind string `yaml:"kind"`
	// Node, when given, makes Device an index within that node; else
	// Device counts over all devices, node after node.
	Node   string `yaml:"node"`
	Device int    `yaml:"device"`
	// For and Factor: a slow fault's span and latency multiple.
	For    time.Duration `yaml:"for"`
	Factor float64       `yaml:"factor"`
}

// Policy is the batcher's policy (actors.BatcherConfig); every default is
// actors.DefaultBatcherConfig's.
type Policy struct {
	BatchMax      int           `yaml:"batch_max"`
	QueueMax      int           `yaml:"queue_max"`
	QueueTotalMax int           `yaml:"queue_total_max"`
	KeysMax       int           `yaml:"keys_max"`
	SLO           time.Duration `yaml:"slo"`
	TimeoutMax    time.Duration `yaml:"timeout_max"`
	Margin        time.Duration `yaml:"margin"`
	// LearnOverrun has the batcher learn how much longer than the cost
	// model its batches run (with devices.latency_spread, or slow faults)
	// and plan with it, as the live server's does; OverrunMax caps one
	// batch's overrun.
	LearnOverrun bool          `yaml:"learn_overrun"`
	OverrunMax   time.Duration `yaml:"overrun_max"`
	// LingerMax, when positive, caps the linger derived from the SLO.
	LingerMax  time.Duration `yaml:"linger_max"`
	AttemptMax int           `yaml:"attempt_max"`
	// KeyPolicy is fair (weighted device time per tenant) or slack
	// (earliest deadline first).
	KeyPolicy          string        `yaml:"key_policy"`
	PriorityAging      time.Duration `yaml:"priority_aging"`
	BucketMerge        bool          `yaml:"bucket_merge"`
	SignalWindow       time.Duration `yaml:"signal_window"`
	TargetUtilization  float64       `yaml:"target_utilization"`
	NoDeviceRetryAfter time.Duration `yaml:"no_device_retry_after"`
}

// defaults returns a scenario holding every default, for a file to be
// decoded over.
func defaults() Scenario {
	b := actors.DefaultBatcherConfig()
	d := actors.DefaultDeviceConfig()
	return Scenario{
		Seed:        1,
		DrainMax:    5 * time.Minute,
		SampleEvery: time.Second,
		Devices: Devices{
			WatchdogMultiple:  d.WatchdogMultiple,
			RestartBackoff:    d.RestartBackoff,
			RestartBackoffMax: d.RestartBackoffMax,
			QuarantineAfter:   d.QuarantineAfter,
			QuarantineFor:     d.QuarantineFor,
		},
		Faults: Faults{SlowFactor: 4},
		Policy: Policy{
			BatchMax:           b.BatchMax,
			QueueMax:           b.QueueMax,
			QueueTotalMax:      b.QueueTotalMax,
			KeysMax:            b.KeysMax,
			SLO:                b.SLO,
			TimeoutMax:         b.TimeoutMax,
			Margin:             b.Margin,
			LearnOverrun:       b.LearnOverrun,
			OverrunMax:         b.OverrunMax,
			LingerMax:          b.LingerMax,
			AttemptMax:         b.AttemptMax,
			KeyPolicy:          "fair",
			PriorityAging:      b.PriorityAging,
			BucketMerge:        b.BucketMerge,
			SignalWindow:       b.SignalWindow,
			TargetUtilization:  b.TargetUtilization,
			NoDeviceRetryAfter: b.NoDeviceRetryAfter,
		},
	}
}

// UnmarshalYAML fills a listed version's unset keys with their defaults.
// The callback form decodes with the caller's decoder, so unknown keys
// stay errors.
func (v *Version) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Version
	p := plain{Weight: 1}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*v = Version(p)
	return nil
}

// UnmarshalYAML fills a listed tenant's unset keys with their defaults.
func (t *Tenant) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Tenant
	p := plain{Weight: 1, Priority: "normal"}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*t = Tenant(p)
	return nil
}

// UnmarshalYAML fills a phase's unset keys with their defaults.
func (ph *Phase) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Phase
	p := plain{Arrival: "poisson", InputLen: InputLen{Min: 16, Max: 64}}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*ph = Phase(p)
	return nil
}

// UnmarshalYAML fills a mix entry's unset weight.
func (m *Mix) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Mix
	p := plain{Weight: 1}
	if err := unmarshal(&p); err != nil {
		return err
	}
	*m = Mix(p)
	return nil
}

// Name of the file the scenario was read from, as errors quote it.
func (s *Scenario) File() string { return s.file }

// Checks are the scenario's parsed expectations, in file order.
func (s *Scenario) Checks() []Check { return s.checks }
