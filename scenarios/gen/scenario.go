package gen

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/batchd/batchd/actors/gen"
	simgen "github.com/batchd/batchd/sim/gen"
)

//go:embed *.yaml
var builtin embed.FS

// ErrUnknown: the argument names no built-in scenario and no file.
var ErrUnknown = errors.New("no such generation scenario")

// Scenario is one generation scenario file. Durations are Go durations
// ("100ms", "1m30s"). A key left out keeps the default its field's
// comment gives (sim/gen.DefaultConfig's reference workload); an unknown
// key is an error.
type Scenario struct {
	// Name identifies the scenario: lowercase letters, digits and dashes.
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	// Long marks a scenario `go test` skips unless run with
	// -scenarios.long.
	Long bool `yaml:"long"`
	// Seed is the master seed unless the command line says otherwise.
	// Default 1.
	Seed uint64 `yaml:"seed"`
	// Duration is how long arrivals go on at each rate. Default 60s.
	Duration time.Duration `yaml:"duration"`
	// Rates are the offered loads, req/s over all tenants: one run each.
	Rates []float64 `yaml:"rates"`
	// Static batches statically (the comparison mode). Default false.
	Static bool `yaml:"static"`
	// Devices is the group's devices. Default 2.
	Devices int  `yaml:"devices"`
	KV      KV   `yaml:"kv"`
	Step    Step `yaml:"step"`
	SLO     SLO  `yaml:"slo"`
	// Prompt and Output are the prompt and output length distributions
	// (the emulated generator ends an output at its drawn length).
	// Default: median 256, sigma 1, max 4096; median 64, sigma 1, max
	// 1024.
	Prompt Lognormal `yaml:"prompt"`
	Output Lognormal `yaml:"output"`
	// MaxTokens is every request's max_tokens. Default 1024.
	MaxTokens int `yaml:"max_tokens"`
	// Tenants share the rate by their shares. Default: a and b, equal.
	Tenants []Tenant `yaml:"tenants"`
	Faults  Faults   `yaml:"faults"`
	// Expect are the checks: "[rate:R] [tenant:T] METRIC OP VALUE" (see
	// Metrics). Without rate:, a check holds at every rate.
	Expect []string `yaml:"expect"`

	file string
}

// KV is the devices' KV cache. Defaults: gen.DefaultConfig's.
type KV struct {
	BlockTokens     int `yaml:"block_tokens"`
	BlocksPerDevice int `yaml:"blocks_per_device"`
	HeadroomBlocks  int `yaml:"headroom_blocks"`
	PreemptMax      int `yaml:"preempt_max"`
}

// Step is a device step: its token budget, its sequences, its cost.
// Defaults: gen.DefaultConfig's.
type Step struct {
	TokensMax int  `yaml:"tokens_max"`
	SeqsMax   int  `yaml:"seqs_max"`
	Cost      Cost `yaml:"cost"`
}

// Cost is the step cost model: base + per_token·fed +
// per_sample·sampled + per_kv_token·KV (gen.Cost).
type Cost struct {
	Base       time.Duration `yaml:"base"`
	PerToken   time.Duration `yaml:"per_token"`
	PerSample  time.Duration `yaml:"per_sample"`
	PerKVToken time.Duration `yaml:"per_kv_token"`
}

// SLO: the TTFT deadline and the whole request's. Defaults 1s and 60s.
type SLO struct {
	TTFT    time.Duration `yaml:"ttft"`
	Timeout time.Duration `yaml:"timeout"`
}

// Lognormal is a length distribution: exp(ln(median) + sigma·N(0,1)),
// at most max.
type Lognormal struct {
	Median float64 `yaml:"median"`
	Sigma  float64 `yaml:"sigma"`
	Max    int     `yaml:"max"`
}

// Tenant is one tenant: its weight, its priority and its share of the
// rate. Defaults: weight 1, priority 0, share 1.
type Tenant struct {
	Name     string  `yaml:"name"`
	Weight   int     `yaml:"weight"`
	Priority int8    `yaml:"priority"`
	Share    float64 `yaml:"share"`
}

// Faults: a chance per step that the device crashes or hangs, while
// arrivals go on; a fraction of the requests their clients cancel within
// cancel_within of arrival.
type Faults struct {
	CrashP       float64       `yaml:"crash_p"`
	HangP        float64       `yaml:"hang_p"`
	CancelFrac   float64       `yaml:"cancel_fraction"`
	CancelWithin time.Duration `yaml:"cancel_within"`
}

// File is where the scenario was loaded from.
func (s *Scenario) File() string { return s.file }

// Builtins lists the built-in scenarios' names.
func Builtins() []string {
	ents, _ := fs.ReadDir(builtin, ".")
	var out []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok {
			out = append(out, n)
		}
	}
	return out
}

// Find loads the built-in scenario named arg, or else the file at arg.
func Find(arg string) (*Scenario, error) {
	if slices.Contains(Builtins(), arg) {
		data, err := builtin.ReadFile(arg + ".yaml")
		if err != nil {
			return nil, err
		}
		return Parse(path.Join("scenarios/gen", arg+".yaml"), data)
	}
	data, err := os.ReadFile(arg)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%q: %w (built-in: %s)", arg, ErrUnknown, strings.Join(Builtins(), ", "))
	}
	if err != nil {
		return nil, err
	}
	return Parse(arg, data)
}

// Parse reads a scenario from data (file names it in errors), strictly:
// an unknown key, a bad value or a bad expectation is an error.
func Parse(file string, data []byte) (*Scenario, error) {
	s := defaults()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(s); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	s.file = file
	if err := s.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return s, nil
}

func defaults() *Scenario {
	g := gen.DefaultConfig("llm", "v1", 2)
	ref := simgen.DefaultConfig(1, 1)
	return &Scenario{
		Seed: 1, Duration: ref.Duration, Devices: g.Devices,
		KV:     KV{BlockTokens: g.BlockTokens, BlocksPerDevice: g.BlocksPerDevice, HeadroomBlocks: g.AdmitHeadroomBlocks, PreemptMax: g.PreemptMax},
		Step:   Step{TokensMax: g.StepTokensMax, SeqsMax: g.SeqsMax, Cost: Cost(g.Cost)},
		SLO:    SLO{TTFT: g.TTFT, Timeout: g.Timeout},
		Prompt: Lognormal(ref.PromptLen), Output: Lognormal(ref.OutLen), MaxTokens: ref.MaxTokens,
	}
}

func (s *Scenario) validate() error {
	switch {
	case s.Name == "" || strings.Trim(s.Name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "":
		return fmt.Errorf("name %q: want lowercase letters, digits and dashes", s.Name)
	case len(s.Rates) == 0:
		return errors.New("rates: want at least one rate")
	}
	for i, r := range s.Rates {
		if !(r > 0) || slices.Contains(s.Rates[:i], r) {
			return fmt.Errorf("rates[%d] %v: want positive and distinct", i, r)
		}
	}
	for i, t := range s.Tenants {
		if t.Name == "" || t.Share < 0 || t.Weight < 0 || slices.ContainsFunc(s.Tenants[:i], func(o Tenant) bool { return o.Name == t.Name }) {
			return fmt.Errorf("tenants[%d] %+v: want a new name, weight and share >= 0", i, t)
		}
	}
	if _, err := s.Config(s.Seed, s.Rates[0]); err != nil {
		return err
	}
	for i, e := range s.Expect {
		if _, err := s.parseCheck(e); err != nil {
			return fmt.Errorf("expect[%d] %q: %w", i, e, err)
		}
	}
	return nil
}

// Config is the simulator's configuration of the scenario at rate.
func (s *Scenario) Config(seed uint64, rate float64) (simgen.Config, error) {
	cfg := simgen.DefaultConfig(seed, rate)
	g := &cfg.Gen
	g.Devices, g.Static = s.Devices, s.Static
	g.BlockTokens, g.BlocksPerDevice, g.AdmitHeadroomBlocks, g.PreemptMax = s.KV.BlockTokens, s.KV.BlocksPerDevice, s.KV.HeadroomBlocks, s.KV.PreemptMax
	g.StepTokensMax, g.SeqsMax, g.Cost = s.Step.TokensMax, s.Step.SeqsMax, gen.Cost(s.Step.Cost)
	g.TTFT, g.Timeout = s.SLO.TTFT, s.SLO.Timeout
	g.PromptMax, g.TokensMax = max(g.PromptMax, s.Prompt.Max), max(g.TokensMax, s.MaxTokens)
	cfg.PromptLen, cfg.OutLen, cfg.MaxTokens = gen.Lognormal(s.Prompt), gen.Lognormal(s.Output), s.MaxTokens
	cfg.Duration = s.Duration
	cfg.CrashP, cfg.HangP, cfg.FaultsUntil = s.Faults.CrashP, s.Faults.HangP, s.Duration
	cfg.CancelFrac, cfg.CancelWithin = s.Faults.CancelFrac, s.Faults.CancelWithin
	if len(s.Tenants) > 0 {
		cfg.Tenants = nil
		sum := 0.0
		for _, t := range s.Tenants {
			sum += cmpOr(t.Share, 1)
		}
		for _, t := range s.Tenants {
			cfg.Tenants = append(cfg.Tenants, simgen.Tenant{Name: t.Name, Weight: max(t.Weight, 1), Priority: t.Priority, Rate: rate * cmpOr(t.Share, 1) / sum})
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func cmpOr(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}
