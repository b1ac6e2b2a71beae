package actors

import "time"

// modelState is a model's resolved settings.
type modelState struct {
	name        string
	versions    []VersionConfig
	totalWeight int
	batchMax    int
	inputLenMax int
	slo         time.Duration
	edges       []int
	// registered: from the registry, kept for good. A model the open
	// registry made up is kept while a key of it is (keys counts them).
	registered bool
	keys       int
}

// model returns the named model's settings: from the registry, or, with no
// registry, defaults for any name. Nil if unknown. A model made up for the
// open registry is stored only with its first key (newKey), so a request
// that is turned away leaves no state behind.
func (b *Batcher) model(name string) *modelState {
	if b.lastKey != nil && b.lastKey.model.name == name {
		return b.lastKey.model
	}
	if m := b.models[name]; m != nil {
		return m
	}
	if len(b.cfg.Models) > 0 {
		return nil
	}
	return &modelState{name: name, batchMax: b.cfg.BatchMax, slo: b.cfg.SLO}
}

func newModelState(c ModelConfig, cfg BatcherConfig) *modelState {
	m := &modelState{name: c.Name, versions: c.Versions, inputLenMax: c.InputLenMax,
		batchMax: cfg.BatchMax, slo: cfg.SLO, edges: c.BucketEdges, registered: true}
	for _, v := range c.Versions {
		m.totalWeight += v.Weight
	}
	if c.BatchMax > 0 {
		m.batchMax = min(c.BatchMax, cfg.BatchMax)
	}
	if c.SLO > 0 {
		m.slo = c.SLO
	}
	return m
}

// route resolves the version a request runs on: the one it pins, if the
// model has it, or one drawn by the versions' weights from the request id,
// so the same id always lands on the same version. ok is false for a
// version the model does not have.
func (m *modelState) route(id uint64, version string) (string, bool) {
	if len(m.versions) == 0 { // no registry: any version as given
		return version, true
	}
	if version != "" {
		for _, v := range m.versions {
			if v.Name == version {
				return version, true
			}
		}
		return "", false
	}
	x := int(Mix64(id) % uint64(m.totalWeight))
	for _, v := range m.versions {
		if x < v.Weight {
			return v.Name, true
		}
		x -= v.Weight
	}
	panic("batchd: version weights do not add up")
}

// bucket is the input-length bucket of an input of n bytes.
func (m *modelState) bucket(n int) int {
	for i, e := range m.edges {
		if n <= e {
			return i
		}
	}
	return len(m.edges)
}

// Mix64 is SplitMix64's finaliser: it spreads every input bit over every
// output bit. Request ids are sequential, and routing needs them spread
// evenly over the weights; the engine mixes a node's incarnation into its
// fronts' (FrontConfig.Incarnation).
func Mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// modelConfig returns the registry entry for name, if any.
func (c BatcherConfig) modelConfig(name string) (ModelConfig, bool) {
	for _, m := range c.Models {
		if m.Name == name {
			return m, true
		}
	}
	return ModelConfig{}, false
}

// Route is the version a request for model with this id and (possibly
// empty) version runs on, as the batcher routes it; ok is false for an
// unknown model or version. Checkers use it to derive keys the way the
// batcher does.
func (c BatcherConfig) Route(model string, id uint64, version string) (string, bool) {
	if len(c.Models) == 0 {
		return version, model != ""
	}
	mc, ok := c.modelConfig(model)
	if !ok {
		return "", false
	}
	return newModelState(mc, c).route(id, version)
}

// Bucket is the length bucket of an input of n bytes for model.
func (c BatcherConfig) Bucket(model string, n int) int {
	mc, _ := c.modelConfig(model)
	return (&modelState{edges: mc.BucketEdges}).bucket(n)
}
