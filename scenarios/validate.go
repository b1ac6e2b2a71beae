package scenarios

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim"
)

// Limits of a scenario beyond the simulator's own, so a typo cannot ask
// for a run nobody meant.
const (
	// NodesLimit bounds the nodes of a scenario.
	NodesLimit = 256
	// PhasesLimit bounds the traffic phases.
	PhasesLimit = 128
	// ExpectLimit bounds the checks.
	ExpectLimit = 256
	// ModelsLimit and TenantsLimit bound the registry and the tenants.
	ModelsLimit  = 1024
	TenantsLimit = 1024
	versionsMax  = 64
	bucketsMax   = 64
	attemptMax   = 100
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// validator collects mistakes with the path of the key each is about.
type validator struct {
	s    *Scenario
	errs []FieldError
}

func (v *validator) bad(path, format string, args ...any) {
	// A key the file leaves out is named with the line of its nearest
	// enclosing key.
	line := 0
	for p := path; p != ""; p = parent(p) {
		if l, ok := v.s.lines[p]; ok {
			line = l
			break
		}
	}
	v.errs = append(v.errs, FieldError{Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// parent strips a path's last key or index: traffic[0].rate → traffic[0]
// → traffic.
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func (v *validator) intIn(path string, x, lo, hi int) {
	if x < lo || x > hi {
		v.bad(path, "%d: want %d to %d", x, lo, hi)
	}
}

func (v *validator) durIn(path string, d, lo, hi time.Duration) {
	if d < lo || d > hi {
		v.bad(path, "%v: want %v to %v", d, lo, hi)
	}
}

func (v *validator) prob(path string, p float64) {
	if !(p >= 0 && p <= 1) { // also NaN
		v.bad(path, "%v: want a probability in [0, 1]", p)
	}
}

func (v *validator) finite(path string, x, lo float64) {
	if !(x >= lo) || math.IsInf(x, 1) {
		v.bad(path, "%v: want a finite number >= %v", x, lo)
	}
}

// validate checks the decoded scenario, reads its latency profile, fills
// the derived defaults (Duration, Windows) and parses the expectations.
func (s *Scenario) validate(readProfile func(string) ([]byte, error)) error {
	v := &validator{s: s}
	if !nameRE.MatchString(s.Name) {
		v.bad("name", "%q: want lowercase letters, digits and dashes", s.Name)
	}
	v.durIn("drain_max", s.DrainMax, time.Millisecond, sim.DurationLimit)
	v.durIn("net_delay", s.NetDelay, 0, time.Second)
	devices := v.nodes()
	v.devices(readProfile)
	models := v.models()
	tenants := v.tenants()
	v.policy()
	v.traffic(models, tenants)
	v.faults(devices)
	v.windows()
	if len(s.Expect) > ExpectLimit {
		v.bad("expect", "%d checks: at most %d", len(s.Expect), ExpectLimit)
	}
	s.checks = nil
	for i, e := range s.Expect {
		p := fmt.Sprintf("expect[%d]", i)
		c, err := parseCheck(e, s)
		if err != nil {
			v.bad(p, "%q: %v", e, err)
			continue
		}
		c.Line = s.lines[p]
		s.checks = append(s.checks, c)
	}
	if len(v.errs) > 0 {
		sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].Line < v.errs[j].Line })
		return &Error{File: s.file, Fields: v.errs}
	}
	// The simulator's own checks are the backstop: whatever the schema
	// lets through that it refuses is still an error of this file.
	cfg, err := s.SimConfig(s.Seed)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return &Error{File: s.file, Fields: []FieldError{{Path: "(scenario)", Msg: err.Error()}}}
	}
	return nil
}

// nodes checks the nodes and returns the number of devices.
func (v *validator) nodes() int {
	s := v.s
	if len(s.Nodes) == 0 || len(s.Nodes) > NodesLimit {
		v.bad("nodes", "%d nodes: want 1 to %d", len(s.Nodes), NodesLimit)
	}
	total := 0
	seen := map[string]bool{}
	for i, n := range s.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		if n.Name == "" || seen[n.Name] {
			v.bad(p+".name", "%q: empty or repeated", n.Name)
		}
		seen[n.Name] = true
		v.intIn(p+".devices", n.Devices, 1, sim.DevicesLimit)
		total += n.Devices
		if len(n.Models) > sim.DeviceModelsLimit {
			v.bad(p+".models", "%d models: at most %d", len(n.Models), sim.DeviceModelsLimit)
		}
		for j, m := range n.Models {
			if len(s.Models) > 0 && !slices.ContainsFunc(s.Models, func(x Model) bool { return x.Name == m }) {
				v.bad(fmt.Sprintf("%s.models[%d]", p, j), "%q is not in the registry (models)", m)
			}
		}
	}
	if total > sim.DevicesLimit {
		v.bad("nodes", "%d devices in all: at most %d", total, sim.DevicesLimit)
	}
	return total
}

// devices checks the devices and resolves the latency model.
func (v *validator) devices(readProfile func(string) ([]byte, error)) {
	d := v.s.Devices
	l := d.Latency
	kinds := 0
	if l.Fixed != 0 {
		kinds++
	}
	if l.Base != 0 || l.PerItem != 0 {
		kinds++
	}
	if l.Profile != "" {
		kinds++
	}
	switch {
	case kinds > 1:
		v.bad("devices.latency", "give one of fixed, base/per_item and profile")
	case l.Fixed < 0 || l.Base < 0 || l.PerItem < 0 || l.PerPaddedByte < 0:
		v.bad("devices.latency", "a cost must not be negative")
	case l.Profile != "":
		data, err := readProfile(l.Profile)
		if err != nil {
			v.bad("devices.latency.profile", "%q: %v", l.Profile, err)
			break
		}
		m, err := actors.ParseLatencyTable(data)
		if err != nil {
			v.bad("devices.latency.profile", "%q: %v", l.Profile, err)
			break
		}
		m.PerPaddedByte = l.PerPaddedByte
		v.s.latency = m
	case l.Fixed != 0:
		v.s.latency = actors.LatencyModel{Base: l.Fixed, PerPaddedByte: l.PerPaddedByte}
	case l.Base != 0 || l.PerItem != 0:
		v.s.latency = actors.LatencyModel{Base: l.Base, PerItem: l.PerItem, PerPaddedByte: l.PerPaddedByte}
	default:
		v.s.latency = actors.FixedLatency(100 * time.Millisecond)
		v.s.latency.PerPaddedByte = l.PerPaddedByte
	}
	if err := v.s.latency.Validate(); err != nil && kinds <= 1 && (l.Profile == "" || len(v.s.latency.Table) > 0) {
		v.bad("devices.latency", "%v", err)
	}
	if !(d.LatencySpread >= 0 && d.LatencySpread <= sim.LatencySpreadLimit) {
		v.bad("devices.latency_spread", "%v: want 0 to %v", d.LatencySpread, float64(sim.LatencySpreadLimit))
	}
	v.intIn("devices.watchdog_multiple", d.WatchdogMultiple, 1, 1000)
	v.durIn("devices.restart_backoff", d.RestartBackoff, time.Millisecond, time.Hour)
	v.durIn("devices.restart_backoff_max", d.RestartBackoffMax, d.RestartBackoff, time.Hour)
	v.intIn("devices.quarantine_after", d.QuarantineAfter, 1, 1000)
	v.durIn("devices.quarantine_for", d.QuarantineFor, time.Millisecond, 24*time.Hour)
}

// models checks the registry and returns its models by name.
func (v *validator) models() map[string]*Model {
	s := v.s
	byName := map[string]*Model{}
	if len(s.Models) > ModelsLimit {
		v.bad("models", "%d models: at most %d", len(s.Models), ModelsLimit)
	}
	for i := range s.Models {
		m := &s.Models[i]
		p := fmt.Sprintf("models[%d]", i)
		if m.Name == "" || byName[m.Name] != nil {
			v.bad(p+".name", "%q: empty or repeated", m.Name)
		}
		byName[m.Name] = m
		if len(m.Versions) == 0 {
			m.Versions = []Version{{Name: "v1", Weight: 1}}
		}
		if len(m.Versions) > versionsMax {
			v.bad(p+".versions", "%d versions: at most %d", len(m.Versions), versionsMax)
		}
		names, total := map[string]bool{}, 0
		for j, ver := range m.Versions {
			vp := fmt.Sprintf("%s.versions[%d]", p, j)
			if ver.Name == "" || names[ver.Name] {
				v.bad(vp+".name", "%q: empty or repeated", ver.Name)
			}
			names[ver.Name] = true
			v.intIn(vp+".weight", ver.Weight, 0, 1_000_000)
			total += max(ver.Weight, 0)
		}
		if total == 0 {
			v.bad(p+".versions", "no version has a routing weight")
		}
		v.intIn(p+".batch_max", m.BatchMax, 0, 1<<16)
		v.intIn(p+".input_len_max", m.InputLenMax, 0, sim.InputLenLimit)
		v.durIn(p+".slo", m.SLO, 0, time.Hour)
		if len(m.BucketEdges) > bucketsMax {
			v.bad(p+".bucket_edges", "%d edges: at most %d", len(m.BucketEdges), bucketsMax)
		}
		for j, e := range m.BucketEdges {
			if e < 1 || (j > 0 && e <= m.BucketEdges[j-1]) {
				v.bad(fmt.Sprintf("%s.bucket_edges[%d]", p, j), "%d: edges must be positive and increasing", e)
			}
		}
	}
	return byName
}

// priorities maps the priority names onto actors' levels.
var priorities = map[string]int8{"low": actors.PriorityLow, "normal": actors.PriorityNormal, "high": actors.PriorityHigh}

// tenants checks the tenants and returns them by name.
func (v *validator) tenants() map[string]*Tenant {
	s := v.s
	byName := map[string]*Tenant{}
	if len(s.Tenants) > TenantsLimit {
		v.bad("tenants", "%d tenants: at most %d", len(s.Tenants), TenantsLimit)
	}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		if t.Name == "" || byName[t.Name] != nil {
			v.bad(p+".name", "%q: empty or repeated", t.Name)
		}
		byName[t.Name] = t
		v.intIn(p+".weight", t.Weight, 1, 1_000_000)
		v.finite(p+".rate", t.Rate, 0)
		v.intIn(p+".burst", t.Burst, 0, 1<<24)
		if t.Rate > 0 && t.Burst < 1 {
			v.bad(p+".burst", "a rate limit needs a burst of at least 1")
		}
		v.intIn(p+".in_flight_max", t.InFlightMax, 0, 1<<24)
		if _, ok := priorities[t.Priority]; !ok {
			v.bad(p+".priority", "%q: want low, normal or high", t.Priority)
		}
	}
	return byName
}

func (v *validator) policy() {
	p := v.s.Policy
	v.intIn("policy.batch_max", p.BatchMax, 1, 1<<16)
	v.intIn("policy.queue_max", p.QueueMax, 1, p.QueueTotalMax)
	v.intIn("policy.queue_total_max", p.QueueTotalMax, 1, 1<<24)
	v.intIn("policy.keys_max", p.KeysMax, 1, 1<<20)
	v.durIn("policy.slo", p.SLO, time.Microsecond, time.Hour)
	v.durIn("policy.timeout_max", p.TimeoutMax, p.SLO, time.Hour)
	v.durIn("policy.margin", p.Margin, 0, time.Hour)
	v.durIn("policy.overrun_max", p.OverrunMax, 0, time.Hour)
	v.durIn("policy.linger_max", p.LingerMax, 0, time.Hour)
	v.intIn("policy.attempt_max", p.AttemptMax, 1, attemptMax)
	if p.KeyPolicy != "fair" && p.KeyPolicy != "slack" {
		v.bad("policy.key_policy", "%q: want fair or slack", p.KeyPolicy)
	}
	v.durIn("policy.priority_aging", p.PriorityAging, time.Microsecond, time.Hour)
	v.durIn("policy.signal_window", p.SignalWindow, time.Millisecond, time.Hour)
	if !(p.TargetUtilization > 0 && p.TargetUtilization <= 1) {
		v.bad("policy.target_utilization", "%v: want more than 0, at most 1", p.TargetUtilization)
	}
	v.durIn("policy.no_device_retry_after", p.NoDeviceRetryAfter, 0, time.Hour)
}

// arrivals maps the arrival names onto the simulator's processes.
var arrivals = map[string]sim.ArrivalProcess{"poisson": sim.Poisson, "constant": sim.Constant, "diurnal": sim.Diurnal, "burst": sim.Burst}

// traffic checks the phases, fills their starts and the default
// Duration, and checks the tenants and models they name.
func (v *validator) traffic(models map[string]*Model, tenants map[string]*Tenant) {
	s := v.s
	if len(s.Traffic) == 0 || len(s.Traffic) > PhasesLimit {
		v.bad("traffic", "%d phases: want 1 to %d", len(s.Traffic), PhasesLimit)
	}
	var at, end time.Duration
	sources := 0
	for i := range s.Traffic {
		ph := &s.Traffic[i]
		p := fmt.Sprintf("traffic[%d]", i)
		if ph.Start == nil {
			start := at
			ph.Start = &start
		}
		v.durIn(p+".start", *ph.Start, 0, sim.DurationLimit)
		v.durIn(p+".duration", ph.Duration, time.Millisecond, sim.DurationLimit)
		at = *ph.Start + ph.Duration
		end = max(end, at)
		v.finite(p+".rate", ph.Rate, 0)
		arr, ok := arrivals[ph.Arrival]
		if !ok {
			v.bad(p+".arrival", "%q: want poisson, constant, diurnal or burst", ph.Arrival)
		}
		if arr == sim.Diurnal && len(ph.Curve) == 0 {
			ph.Curve = sim.DiurnalCurve()
		}
		if len(ph.Curve) > 0 && arr != sim.Diurnal {
			v.bad(p+".curve", "only a diurnal phase has a curve")
		}
		if arr == sim.Diurnal {
			if len(ph.Curve) < 2 || len(ph.Curve) > sim.RateCurveLimit {
				v.bad(p+".curve", "%d points: want 2 to %d", len(ph.Curve), sim.RateCurveLimit)
			}
			peak := 0.0
			for j, x := range ph.Curve {
				if !(x >= 0 && x <= 1) {
					v.bad(fmt.Sprintf("%s.curve[%d]", p, j), "%v: want a multiple of rate in [0, 1]", x)
				}
				peak = max(peak, x)
			}
			if peak == 0 {
				v.bad(p+".curve", "zero everywhere")
			}
		}
		if arr == sim.Burst {
			v.intIn(p+".burst_size", ph.BurstSize, 1, sim.BurstSizeLimit)
		} else if ph.BurstSize != 0 {
			v.bad(p+".burst_size", "only a burst phase has a burst size")
		}
		if len(ph.Tenants) == 0 {
			ph.Tenants = map[string]float64{"t": 1}
		}
		sources += len(ph.Tenants)
		for _, name := range sortedKeys(ph.Tenants) {
			tp := p + ".tenants." + name
			v.finite(tp, ph.Tenants[name], 0)
			if ph.Tenants[name] == 0 {
				v.bad(tp, "a share must be more than 0")
			}
			if len(tenants) > 0 && tenants[name] == nil {
				v.bad(tp, "tenant %q is not listed under tenants", name)
			}
		}
		if len(ph.Models) == 0 {
			ph.Models = defaultMix(s.Models)
		}
		for j, m := range ph.Models {
			mp := fmt.Sprintf("%s.models[%d]", p, j)
			if m.Model == "" {
				v.bad(mp+".model", "empty")
			}
			if !(m.Weight > 0) || math.IsInf(m.Weight, 1) {
				v.bad(mp+".weight", "%v: want a finite number > 0", m.Weight)
			}
			reg := models[m.Model]
			if len(models) > 0 && reg == nil {
				v.bad(mp+".model", "%q is not in the registry (models)", m.Model)
			}
			if reg != nil && m.Version != "" && !slices.ContainsFunc(reg.Versions, func(x Version) bool { return x.Name == m.Version }) {
				v.bad(mp+".version", "%q is not a version of %q", m.Version, m.Model)
			}
		}
		v.intIn(p+".input_len.min", ph.InputLen.Min, 1, sim.InputLenLimit)
		v.intIn(p+".input_len.max", ph.InputLen.Max, max(ph.InputLen.Min, 1), sim.InputLenLimit)
		v.durIn(p+".timeout", ph.Timeout, 0, time.Hour)
		v.prob(p+".cancel_rate", ph.CancelRate)
		v.durIn(p+".cancel_after", ph.CancelAfter, 0, time.Hour)
		if ph.Poison != nil {
			if !(ph.Poison.Share > 0 && ph.Poison.Share <= 1) {
				v.bad(p+".poison.share", "%v: want a share in (0, 1]", ph.Poison.Share)
			}
			v.intIn(p+".poison.inputs", ph.Poison.Inputs, 0, sim.PoisonInputsLimit)
			if s.Faults.PoisonPrefix == "" {
				v.bad(p+".poison", "needs faults.poison_prefix: poison inputs start with it")
			}
		}
	}
	if sources > sim.SourcesLimit {
		v.bad("traffic", "%d (phase, tenant) pairs: at most %d", sources, sim.SourcesLimit)
	}
	if s.Duration == 0 {
		s.Duration = end
	}
	v.durIn("duration", s.Duration, time.Millisecond, sim.DurationLimit)
	for i, ph := range s.Traffic {
		if ph.Start != nil && *ph.Start+ph.Duration > s.Duration {
			v.bad(fmt.Sprintf("traffic[%d].duration", i), "the phase ends at %v, after the scenario's duration %v: arrivals end with the safety phase", *ph.Start+ph.Duration, s.Duration)
		}
	}
	if s.SampleEvery < time.Millisecond || (s.Duration > 0 && s.Duration/s.SampleEvery > 86_400) {
		v.bad("sample_every", "%v: want at least 1ms and at most 86,400 steps over the duration", s.SampleEvery)
	}
}

// defaultMix is a phase's model mix when it gives none.
func defaultMix(models []Model) []Mix {
	if len(models) == 0 {
		return []Mix{{Model: "m", Version: "v1", Weight: 1}}
	}
	mix := make([]Mix, len(models))
	for i, m := range models {
		mix[i] = Mix{Model: m.Name, Weight: 1}
	}
	return mix
}

var faultKinds = map[string]sim.FaultKind{"crash": sim.FaultCrash, "hang": sim.FaultHang, "slow": sim.FaultSlow}

func (v *validator) faults(devices int) {
	s := v.s
	f := s.Faults
	v.prob("faults.crash_rate", f.CrashRate)
	v.prob("faults.hang_rate", f.HangRate)
	v.prob("faults.slow_rate", f.SlowRate)
	v.prob("faults.batch_error_rate", f.BatchErrorRate)
	v.prob("faults.item_error_rate", f.ItemErrorRate)
	if sum := f.CrashRate + f.HangRate + f.BatchErrorRate; sum > 1 {
		v.bad("faults", "crash_rate + hang_rate + batch_error_rate = %v: must not exceed 1", sum)
	}
	if !(f.SlowFactor >= 1) || math.IsInf(f.SlowFactor, 1) {
		v.bad("faults.slow_factor", "%v: want a finite number >= 1", f.SlowFactor)
	}
	v.durIn("faults.heal_at", f.HealAt, 0, sim.DurationLimit)
	v.intIn("faults.healthy_devices", f.HealthyDevices, 0, devices)
	if len(f.Schedule) > sim.ScheduledFaultsLimit {
		v.bad("faults.schedule", "%d faults: at most %d", len(f.Schedule), sim.ScheduledFaultsLimit)
	}
	for i, x := range f.Schedule {
		p := fmt.Sprintf("faults.schedule[%d]", i)
		if s.Duration > 0 {
			v.durIn(p+".at", x.At, 0, s.Duration-1)
		}
		kind, ok := faultKinds[x.Kind]
		if !ok {
			v.bad(p+".kind", "%q: want crash, hang or slow", x.Kind)
		}
		if _, err := s.deviceIndex(x); err != nil {
			v.bad(p+".device", "%v", err)
		}
		if kind == sim.FaultSlow {
			v.durIn(p+".for", x.For, time.Microsecond, sim.DurationLimit)
			v.finite(p+".factor", x.Factor, 1)
		} else if x.For != 0 || x.Factor != 0 {
			v.bad(p, "for and factor are a slow fault's")
		}
	}
}

// deviceIndex is the global index of a scheduled fault's device.
func (s *Scenario) deviceIndex(f Fault) (int, error) {
	first, total := 0, 0
	found := f.Node == ""
	for _, n := range s.Nodes {
		if n.Name == f.Node {
			first, found = total, true
			if f.Device < 0 || f.Device >= n.Devices {
				return 0, fmt.Errorf("%d: node %q has devices 0 to %d", f.Device, n.Name, n.Devices-1)
			}
		}
		total += n.Devices
	}
	switch {
	case !found:
		return 0, fmt.Errorf("no node %q", f.Node)
	case f.Node == "" && (f.Device < 0 || f.Device >= total):
		return 0, fmt.Errorf("%d: the devices are 0 to %d", f.Device, total-1)
	}
	return first + f.Device, nil
}

// windows checks the windows or derives them from the phases.
func (v *validator) windows() {
	s := v.s
	if len(s.Windows) == 0 {
		bounds := []time.Duration{0, s.Duration}
		for _, ph := range s.Traffic {
			if ph.Start != nil {
				bounds = append(bounds, *ph.Start, min(*ph.Start+ph.Duration, s.Duration))
			}
		}
		slices.Sort(bounds)
		s.Windows = slices.Compact(bounds)
		if len(s.Windows) > sim.WindowsLimit {
			v.bad("traffic", "the phases make %d windows: at most %d (give windows: explicitly)", len(s.Windows), sim.WindowsLimit)
		}
		return
	}
	if len(s.Windows) > sim.WindowsLimit {
		v.bad("windows", "%d windows: at most %d", len(s.Windows), sim.WindowsLimit)
	}
	for i, w := range s.Windows {
		if w < 0 || (i > 0 && w <= s.Windows[i-1]) {
			v.bad(fmt.Sprintf("windows[%d]", i), "%v: windows must be increasing and not negative", w)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
