package schema

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/batchd/batchd/actors"
)

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
	// Weight routes the requests that name no version; 0 serves only
	// requests that pin it. Default 1.
	Weight int `yaml:"weight"`
}

// DefaultVersion is what a listed version starts from: weight 1, so a
// model's versions share the traffic equally unless the file says
// otherwise.
func DefaultVersion() Version { return Version{Weight: 1} }

// DefaultModel is what a listed model starts from: one version, v1, and no
// limits of its own (the policy's apply) and one bucket.
func DefaultModel() Model {
	v := DefaultVersion()
	v.Name = "v1"
	return Model{Versions: []Version{v}}
}

// UnmarshalYAML fills a listed model's unset keys from DefaultModel. The
// older callback form is used on purpose: it decodes with the caller's
// decoder, so unknown keys stay errors (the Node form would not).
func (m *Model) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Model
	p := plain(DefaultModel())
	if err := unmarshal(&p); err != nil {
		return err
	}
	*m = Model(p)
	return nil
}

// UnmarshalYAML fills a listed version's unset keys from DefaultVersion.
func (v *Version) UnmarshalYAML(unmarshal func(any) error) error {
	type plain Version
	p := plain(DefaultVersion())
	if err := unmarshal(&p); err != nil {
		return err
	}
	*v = Version(p)
	return nil
}

// ModelConfigs is the registry as the batcher takes it.
func ModelConfigs(ms []Model) []actors.ModelConfig {
	var out []actors.ModelConfig
	for _, m := range ms {
		mc := actors.ModelConfig{Name: m.Name, BatchMax: m.BatchMax, InputLenMax: m.InputLenMax, SLO: m.SLO,
			BucketEdges: slices.Clone(m.BucketEdges)}
		for _, v := range m.Versions {
			mc.Versions = append(mc.Versions, actors.VersionConfig{Name: v.Name, Weight: v.Weight})
		}
		out = append(out, mc)
	}
	return out
}

// Bounds of the registry.
const (
	// ModelsMax bounds the models of a registry.
	ModelsMax      = 1024
	versionsMax    = 64
	bucketEdgesMax = 64
)

// CheckModels validates the registry ms under the path prefix (models)
// against the policy p, with inputLenMax the longest input the surface
// takes; it returns the set of model names.
func CheckModels(v *Validator, prefix string, ms []Model, p Policy, inputLenMax int) map[string]bool {
	names := map[string]bool{}
	if len(ms) > ModelsMax {
		v.Bad(prefix, "%d models: want at most %d", len(ms), ModelsMax)
	}
	for i, m := range ms {
		mp := fmt.Sprintf("%s[%d]", prefix, i)
		checkName(v, mp+".name", m.Name, names)
		if len(m.Versions) == 0 || len(m.Versions) > versionsMax {
			v.Bad(mp+".versions", "%d versions: want 1 to %d", len(m.Versions), versionsMax)
		}
		vnames, total := map[string]bool{}, 0
		for j, ver := range m.Versions {
			vp := fmt.Sprintf("%s.versions[%d]", mp, j)
			checkName(v, vp+".name", ver.Name, vnames)
			v.IntIn(vp+".weight", ver.Weight, 0, 1_000_000)
			total += max(ver.Weight, 0)
		}
		if len(m.Versions) > 0 && total == 0 {
			v.Bad(mp+".versions", "no version has a weight above 0, so requests that name no version have nowhere to go")
		}
		v.IntIn(mp+".batch_max", m.BatchMax, 0, p.BatchMax)
		v.IntIn(mp+".input_len_max", m.InputLenMax, 0, inputLenMax)
		v.DurIn(mp+".slo", m.SLO, 0, p.TimeoutMax)
		if len(m.BucketEdges) > bucketEdgesMax {
			v.Bad(mp+".bucket_edges", "%d edges: want at most %d", len(m.BucketEdges), bucketEdgesMax)
		}
		for j, e := range m.BucketEdges {
			if e < 1 || (j > 0 && e <= m.BucketEdges[j-1]) {
				v.Bad(fmt.Sprintf("%s.bucket_edges[%d]", mp, j), "%d: want positive and increasing", e)
			}
		}
	}
	return names
}

// checkName checks a model or version name, a URL path segment, and adds
// it to seen.
func checkName(v *Validator, path, name string, seen map[string]bool) {
	switch {
	case name == "":
		v.Bad(path, "missing")
	case seen[name]:
		v.Bad(path, "%q: listed twice", name)
	case strings.ContainsAny(name, "/ \t\n?#%"):
		v.Bad(path, "%q: must not hold '/', '?', '#', '%%' or spaces (it is a URL path segment)", name)
	}
	seen[name] = true
}

// Tenant is one tenant's name, share and limits. A surface embeds it
// inline with what only it knows (an API key, a priority).
type Tenant struct {
	Name   string `yaml:"name"`
	Limits `yaml:",inline"`
}

// Limits are a tenant's share and limits (actors.TenantConfig).
type Limits struct {
	// Weight is the share of device time against other backlogged
	// tenants. Default 1.
	Weight int `yaml:"weight"`
	// Rate (requests per second) and Burst form a token bucket (429
	// beyond); Rate 0 is no limit.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// InFlightMax caps the tenant's requests queued or running; 0 is none.
	InFlightMax int `yaml:"in_flight_max"`
}

// LimitsOf is the limits t holds, weight at least 1: what a listed tenant
// and the default tenant start from.
func LimitsOf(t actors.TenantConfig) Limits {
	return Limits{Weight: max(t.Weight, 1), Rate: t.Rate, Burst: t.Burst, InFlightMax: t.InflightMax}
}

// DefaultLimits are the batcher's default tenant's (weight 1, no limits).
func DefaultLimits() Limits { return LimitsOf(actors.DefaultBatcherConfig().DefaultTenant) }

// Config is the tenant config of the tenant called name with these limits.
func (l Limits) Config(name string) actors.TenantConfig {
	return actors.TenantConfig{Name: name, Weight: l.Weight, Rate: l.Rate, Burst: l.Burst, InflightMax: l.InFlightMax}
}

// Check validates the limits under the path prefix (tenants[0]).
func (l Limits) Check(v *Validator, prefix string) {
	v.IntIn(prefix+".weight", l.Weight, 1, 1_000_000)
	if !(l.Rate >= 0 && l.Rate <= math.MaxInt32) {
		v.Bad(prefix+".rate", "%v: want 0 (no limit) or a positive rate per second", l.Rate)
	}
	v.IntIn(prefix+".burst", l.Burst, 0, math.MaxInt32)
	if l.Rate > 0 && l.Burst < 1 {
		v.Bad(prefix+".burst", "%d: a rate needs a burst of at least 1", l.Burst)
	}
	v.IntIn(prefix+".in_flight_max", l.InFlightMax, 0, InFlightMaxMax)
}

// Check validates the tenant at path (tenants[0]), its name unique among
// seen, to which it is added.
func (t Tenant) Check(v *Validator, path string, seen map[string]bool) {
	switch {
	case t.Name == "":
		v.Bad(path+".name", "missing")
	case seen[t.Name]:
		v.Bad(path+".name", "%q: listed twice", t.Name)
	}
	seen[t.Name] = true
	t.Limits.Check(v, path)
}

// CheckTenantCount checks that n listed tenants fit the policy.
func CheckTenantCount(v *Validator, path string, n int, p Policy) {
	if n > p.TenantsMax {
		v.Bad(path, "%d tenants: more than policy.tenants_max (%d)", n, p.TenantsMax)
	}
}
