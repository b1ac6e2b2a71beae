package scenarios

import (
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/schema"
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
	// DefaultTenant holds the share and limits of any tenant not listed.
	// Default: weight 1, no limits.
	DefaultTenant schema.Limits `yaml:"default_tenant"`
	// Traffic is the list of phases; at least one.
	Traffic []Phase `yaml:"traffic"`
	// Faults are the device faults, at rates and at given times.
	Faults schema.Faults `yaml:"faults"`
	// Policy is the batcher's policy (the schema's, as in a serve config);
	// every default is actors.DefaultBatcherConfig's.
	Policy schema.Policy `yaml:"policy"`
	// Autoscale, when present, runs the autoscaler on the fleet: the nodes'
	// devices are the fleet it starts with (and the static fleet its
	// device-hours are compared with), autoscale.devices_max the most it
	// may grow to. Absent, the fleet is static.
	Autoscale *schema.Autoscale `yaml:"autoscale"`
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
	// Supervision: watchdog (default 3x the predicted latency), restart
	// backoff (100ms doubling to 5s), quarantine (after 5 failures, for
	// 30s): actors.DefaultDeviceConfig's.
	schema.Supervision `yaml:",inline"`
}

// Latency is a batch cost model: fixed, a model (base + per_item × size,
// or a measured table) or a measured profile file, each optionally plus
// per_padded_byte × size × the longest input. Exactly one of fixed,
// base/per_item/table and profile.
type Latency struct {
	Fixed               time.Duration `yaml:"fixed"`
	schema.LatencyModel `yaml:",inline"`
	// Profile is a file of "batch_size,latency" lines (see
	// actors.ParseLatencyTable), relative to the scenario file.
	Profile string `yaml:"profile"`
}

// The registry is the schema's, as in a serve config.
type (
	// Model is one model of the registry. Its versions default to one,
	// v1, weight 1.
	Model = schema.Model
	// Version is one version of a model, weight 1 unless given.
	Version = schema.Version
)

// Tenant is one tenant's share, quotas and priority.
type Tenant struct {
	// Name, weight (default 1), rate and burst (a token bucket, 429
	// beyond; rate 0 is no limit), in_flight_max (0: none).
	schema.Tenant `yaml:",inline"`
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

// defaults returns a scenario holding every default, for a file to be
// decoded over.
func defaults() Scenario {
	b := actors.DefaultBatcherConfig()
	d := actors.DefaultDeviceConfig()
	return Scenario{
		Seed:          1,
		DrainMax:      5 * time.Minute,
		SampleEvery:   time.Second,
		Devices:       Devices{Supervision: schema.SupervisionOf(d)},
		DefaultTenant: schema.LimitsOf(b.DefaultTenant),
		Faults:        schema.FaultsOf(),
		Policy:        schema.PolicyOf(b),
	}
}

// UnmarshalYAML fills a listed tenant's unset keys with their defaults.
func (t *Tenant) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Tenant
	p := plain{Tenant: schema.Tenant{Limits: schema.DefaultLimits()}, Priority: "normal"}
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
