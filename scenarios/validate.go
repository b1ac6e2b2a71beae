package scenarios

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/schema"
	"github.com/batchd/batchd/sim"
)

// Limits of a scenario beyond the simulator's and the schema's own, so a
// typo cannot ask for a run nobody meant.
const (
	// NodesLimit bounds the nodes of a scenario.
	NodesLimit = 256
	// PhasesLimit bounds the traffic phases.
	PhasesLimit = 128
	// ExpectLimit bounds the checks.
	ExpectLimit = 256
)

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// validator collects mistakes with the path of the key each is about.
type validator struct {
	*schema.Validator
	s *Scenario
}

// validate checks the decoded scenario, reads its latency profile, fills
// the derived defaults (Duration, Windows) and parses the expectations.
func (s *Scenario) validate(readProfile func(string) ([]byte, error)) error {
	v := &validator{Validator: &schema.Validator{Src: schema.Sources(s.file, s.lines), Default: s.file}, s: s}
	if !nameRE.MatchString(s.Name) {
		v.Bad("name", "%q: want lowercase letters, digits and dashes", s.Name)
	}
	v.DurIn("drain_max", s.DrainMax, time.Millisecond, sim.DurationLimit)
	v.DurIn("net_delay", s.NetDelay, 0, time.Second)
	devices := v.nodes()
	v.devices(readProfile)
	s.Policy.Check(v.Validator, "policy")
	if s.Autoscale != nil {
		s.Autoscale.Check(v.Validator, "autoscale", devices)
	}
	models := v.models()
	tenants := v.tenants()
	v.traffic(models, tenants)
	v.faults(devices)
	v.windows()
	if len(s.Expect) > ExpectLimit {
		v.Bad("expect", "%d checks: at most %d", len(s.Expect), ExpectLimit)
	}
	s.checks = nil
	for i, e := range s.Expect {
		p := fmt.Sprintf("expect[%d]", i)
		c, err := parseCheck(e, s)
		if err != nil {
			v.Bad(p, "%q: %v", e, err)
			continue
		}
		c.Line = s.lines[p]
		s.checks = append(s.checks, c)
	}
	if err := v.Err(); err != nil {
		return err
	}
	// The simulator's own checks are the backstop: whatever the schema
	// lets through that it refuses is still an error of this file.
	cfg, err := s.SimConfig(s.Seed)
	if err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return &Error{Fields: []FieldError{{Where: s.file, Path: "(scenario)", Msg: err.Error()}}}
	}
	return nil
}

// nodes checks the nodes and returns the number of devices.
func (v *validator) nodes() int {
	s := v.s
	if len(s.Nodes) == 0 || len(s.Nodes) > NodesLimit {
		v.Bad("nodes", "%d nodes: want 1 to %d", len(s.Nodes), NodesLimit)
	}
	total := 0
	seen := map[string]bool{}
	for i, n := range s.Nodes {
		p := fmt.Sprintf("nodes[%d]", i)
		if n.Name == "" || seen[n.Name] {
			v.Bad(p+".name", "%q: empty or repeated", n.Name)
		}
		seen[n.Name] = true
		v.IntIn(p+".devices", n.Devices, 1, sim.DevicesLimit)
		total += n.Devices
		if len(n.Models) > sim.DeviceModelsLimit {
			v.Bad(p+".models", "%d models: at most %d", len(n.Models), sim.DeviceModelsLimit)
		}
		for j, m := range n.Models {
			if len(s.Models) > 0 && !slices.ContainsFunc(s.Models, func(x Model) bool { return x.Name == m }) {
				v.Bad(fmt.Sprintf("%s.models[%d]", p, j), "%q is not in the registry (models)", m)
			}
		}
	}
	if total > sim.DevicesLimit {
		v.Bad("nodes", "%d devices in all: at most %d", total, sim.DevicesLimit)
	}
	return total
}

// devices checks the devices and resolves the latency model.
func (v *validator) devices(readProfile func(string) ([]byte, error)) {
	d := v.s.Devices
	v.s.latency = latencyModel(v.Validator, "devices.latency", d.Latency, readProfile)
	schema.CheckLatencySpread(v.Validator, "devices.latency_spread", d.LatencySpread)
	d.Supervision.Check(v.Validator, "devices")
}

// latencyModel checks a latency: key at path and returns the model it
// states (a profile read with readProfile), the seeds' fixed 100 ms when
// it states none. One-node and cluster scenarios both take it.
func latencyModel(v *schema.Validator, path string, l Latency, readProfile func(string) ([]byte, error)) actors.LatencyModel {
	model := l.Base != 0 || l.PerItem != 0 || len(l.Table) > 0 || l.Fanout != schema.Fanout{}
	kinds := 0
	for _, given := range []bool{l.Fixed != 0, model, l.Profile != ""} {
		if given {
			kinds++
		}
	}
	if kinds != 1 || !model {
		// per_padded_byte goes with any of them; the model checks its own.
		v.DurIn(path+".per_padded_byte", l.PerPaddedByte, 0, time.Second)
	}
	switch {
	case kinds > 1:
		v.Bad(path, "give one of fixed, base/per_item/table/fanout and profile")
	case l.Profile != "":
		data, err := readProfile(l.Profile)
		if err != nil {
			v.Bad(path+".profile", "%q: %v", l.Profile, err)
			break
		}
		m, err := actors.ParseLatencyTable(data)
		if err != nil {
			v.Bad(path+".profile", "%q: %v", l.Profile, err)
			break
		}
		m.PerPaddedByte = l.PerPaddedByte
		return m
	case l.Fixed != 0:
		v.DurIn(path+".fixed", l.Fixed, time.Microsecond, time.Hour)
		return actors.LatencyModel{Base: l.Fixed, PerPaddedByte: l.PerPaddedByte}
	case model:
		l.LatencyModel.Check(v, path)
		return l.LatencyModel.Model()
	}
	m := actors.FixedLatency(100 * time.Millisecond)
	m.PerPaddedByte = l.PerPaddedByte
	return m
}

// models checks the registry and returns its models by name.
func (v *validator) models() map[string]*Model {
	s := v.s
	schema.CheckModels(v.Validator, "models", s.Models, s.Policy, sim.InputLenLimit)
	byName := map[string]*Model{}
	for i := range s.Models {
		byName[s.Models[i].Name] = &s.Models[i]
	}
	return byName
}

// priorities maps the priority names onto actors' levels.
var priorities = map[string]int8{"low": actors.PriorityLow, "normal": actors.PriorityNormal, "high": actors.PriorityHigh}

// tenants checks the tenants and returns them by name.
func (v *validator) tenants() map[string]*Tenant {
	s := v.s
	byName := map[string]*Tenant{}
	schema.CheckTenantCount(v.Validator, "tenants", len(s.Tenants), s.Policy)
	names := map[string]bool{}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		p := fmt.Sprintf("tenants[%d]", i)
		t.Tenant.Check(v.Validator, p, names)
		byName[t.Name] = t
		if _, ok := priorities[t.Priority]; !ok {
			v.Bad(p+".priority", "%q: want low, normal or high", t.Priority)
		}
	}
	s.DefaultTenant.Check(v.Validator, "default_tenant")
	return byName
}

// arrivals maps the arrival names onto the simulator's processes.
var arrivals = map[string]sim.ArrivalProcess{"poisson": sim.Poisson, "constant": sim.Constant, "diurnal": sim.Diurnal, "burst": sim.Burst}

// traffic checks the phases, fills their starts and the default
// Duration, and checks the tenants and models they name.
func (v *validator) traffic(models map[string]*Model, tenants map[string]*Tenant) {
	s := v.s
	if len(s.Traffic) == 0 || len(s.Traffic) > PhasesLimit {
		v.Bad("traffic", "%d phases: want 1 to %d", len(s.Traffic), PhasesLimit)
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
		v.DurIn(p+".start", *ph.Start, 0, sim.DurationLimit)
		v.DurIn(p+".duration", ph.Duration, time.Millisecond, sim.DurationLimit)
		at = *ph.Start + ph.Duration
		end = max(end, at)
		v.Finite(p+".rate", ph.Rate, 0)
		arr, ok := arrivals[ph.Arrival]
		if !ok {
			v.Bad(p+".arrival", "%q: want poisson, constant, diurnal or burst", ph.Arrival)
		}
		if arr == sim.Diurnal && len(ph.Curve) == 0 {
			ph.Curve = sim.DiurnalCurve()
		}
		if len(ph.Curve) > 0 && arr != sim.Diurnal {
			v.Bad(p+".curve", "only a diurnal phase has a curve")
		}
		if arr == sim.Diurnal {
			if len(ph.Curve) < 2 || len(ph.Curve) > sim.RateCurveLimit {
				v.Bad(p+".curve", "%d points: want 2 to %d", len(ph.Curve), sim.RateCurveLimit)
			}
			peak := 0.0
			for j, x := range ph.Curve {
				if !(x >= 0 && x <= 1) {
					v.Bad(fmt.Sprintf("%s.curve[%d]", p, j), "%v: want a multiple of rate in [0, 1]", x)
				}
				peak = max(peak, x)
			}
			if peak == 0 {
				v.Bad(p+".curve", "zero everywhere")
			}
		}
		if arr == sim.Burst {
			v.IntIn(p+".burst_size", ph.BurstSize, 1, sim.BurstSizeLimit)
		} else if ph.BurstSize != 0 {
			v.Bad(p+".burst_size", "only a burst phase has a burst size")
		}
		if len(ph.Tenants) == 0 {
			ph.Tenants = map[string]float64{"t": 1}
		}
		sources += len(ph.Tenants)
		for _, name := range sortedKeys(ph.Tenants) {
			tp := p + ".tenants." + name
			v.Finite(tp, ph.Tenants[name], 0)
			if ph.Tenants[name] == 0 {
				v.Bad(tp, "a share must be more than 0")
			}
			if len(tenants) > 0 && tenants[name] == nil {
				v.Bad(tp, "tenant %q is not listed under tenants", name)
			}
		}
		if len(ph.Models) == 0 {
			ph.Models = defaultMix(s.Models)
		}
		for j, m := range ph.Models {
			mp := fmt.Sprintf("%s.models[%d]", p, j)
			if m.Model == "" {
				v.Bad(mp+".model", "empty")
			}
			if !(m.Weight > 0) || math.IsInf(m.Weight, 1) {
				v.Bad(mp+".weight", "%v: want a finite number > 0", m.Weight)
			}
			reg := models[m.Model]
			if len(models) > 0 && reg == nil {
				v.Bad(mp+".model", "%q is not in the registry (models)", m.Model)
			}
			if reg != nil && m.Version != "" && !slices.ContainsFunc(reg.Versions, func(x Version) bool { return x.Name == m.Version }) {
				v.Bad(mp+".version", "%q is not a version of %q", m.Version, m.Model)
			}
		}
		v.IntIn(p+".input_len.min", ph.InputLen.Min, 1, sim.InputLenLimit)
		v.IntIn(p+".input_len.max", ph.InputLen.Max, max(ph.InputLen.Min, 1), sim.InputLenLimit)
		v.DurIn(p+".timeout", ph.Timeout, 0, time.Hour)
		v.Prob(p+".cancel_rate", ph.CancelRate)
		v.DurIn(p+".cancel_after", ph.CancelAfter, 0, time.Hour)
		if ph.Poison != nil {
			if !(ph.Poison.Share > 0 && ph.Poison.Share <= 1) {
				v.Bad(p+".poison.share", "%v: want a share in (0, 1]", ph.Poison.Share)
			}
			v.IntIn(p+".poison.inputs", ph.Poison.Inputs, 0, sim.PoisonInputsLimit)
			if s.Faults.PoisonPrefix == "" {
				v.Bad(p+".poison", "needs faults.poison_prefix: poison inputs start with it")
			}
		}
	}
	if sources > sim.SourcesLimit {
		v.Bad("traffic", "%d (phase, tenant) pairs: at most %d", sources, sim.SourcesLimit)
	}
	if s.Duration == 0 {
		s.Duration = end
	}
	v.DurIn("duration", s.Duration, time.Millisecond, sim.DurationLimit)
	for i, ph := range s.Traffic {
		if ph.Start != nil && *ph.Start+ph.Duration > s.Duration {
			v.Bad(fmt.Sprintf("traffic[%d].duration", i), "the phase ends at %v, after the scenario's duration %v: arrivals end with the safety phase", *ph.Start+ph.Duration, s.Duration)
		}
	}
	if s.SampleEvery < time.Millisecond || (s.Duration > 0 && s.Duration/s.SampleEvery > 86_400) {
		v.Bad("sample_every", "%v: want at least 1ms and at most 86,400 steps over the duration", s.SampleEvery)
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

func (v *validator) faults(devices int) {
	s := v.s
	s.Faults.Check(v.Validator, "faults", devices, s.Duration, s.deviceIndex)
}

// deviceIndex is the global index of a scheduled fault's device.
func (s *Scenario) deviceIndex(f schema.Fault) (int, error) {
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
			v.Bad("traffic", "the phases make %d windows: at most %d (give windows: explicitly)", len(s.Windows), sim.WindowsLimit)
		}
		return
	}
	if len(s.Windows) > sim.WindowsLimit {
		v.Bad("windows", "%d windows: at most %d", len(s.Windows), sim.WindowsLimit)
	}
	for i, w := range s.Windows {
		if w < 0 || (i > 0 && w <= s.Windows[i-1]) {
			v.Bad(fmt.Sprintf("windows[%d]", i), "%v: windows must be increasing and not negative", w)
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
