package config

import (
	"fmt"
	"time"

	"github.com/batchd/batchd/actors/gen"
)

// Generation is text generation over the OpenAI-compatible API
// (POST /v1/completions, POST /v1/chat/completions with streaming, GET
// /v1/models), on the same listener as the rest of the API: one
// continuous-batching scheduler (gen.Scheduler) per model, on
// emulated devices whose steps take the cost model's time and whose
// tokens are the emulated generator's, or (Backend bytenet) on bytenet's
// generator on the CPU. On by default (the emulated model `tiny`).
type Generation struct {
	// Enabled mounts the OpenAI-compatible routes and starts the
	// schedulers.
	Enabled bool `yaml:"enabled"`
	// Backend is what runs a device's steps: GenBackendEmulated (the
	// emulated generator, each step taking the cost model's time) or
	// GenBackendBytenet (cudabridge's bytenet generator on the CPU: real
	// byte tokens, each step taking its own compute time; every model
	// name served is that one network, and OutputLen is unused: a stream
	// ends at max_tokens).
	Backend string `yaml:"backend"`
	// Models are the generation models served (GET /v1/models), each on
	// Devices devices of its own; Version is their version.
	Models  []string `yaml:"models"`
	Version string   `yaml:"version"`
	Devices int      `yaml:"devices"`
	// BlockTokens is the KV-cache block size in tokens and
	// BlocksPerDevice a device's blocks: the admission resource.
	BlockTokens     int `yaml:"block_tokens"`
	BlocksPerDevice int `yaml:"blocks_per_device"`
	// StepTokensMax is a step's token budget (a decode token for every
	// running sequence, prefill chunks in the rest); SeqsMax bounds a
	// device's running sequences, WaitingMax the requests queued.
	StepTokensMax int `yaml:"step_tokens_max"`
	SeqsMax       int `yaml:"seqs_max"`
	WaitingMax    int `yaml:"waiting_max"`
	// PromptMax bounds a prompt's tokens (bytes); TokensMax bounds
	// max_tokens.
	PromptMax int `yaml:"prompt_max"`
	TokensMax int `yaml:"tokens_max"`
	// TTFTSLO is the time-to-first-token deadline: a request whose first
	// token can no longer come by it is failed early (504). Timeout bounds
	// the whole output.
	TTFTSLO time.Duration `yaml:"ttft_slo"`
	Timeout time.Duration `yaml:"timeout"`
	// ReplyMargin is held back from the TTFT SLO for the first token's way
	// from its step's end to the client (gen.Config.ReplyMargin), so that
	// a request the scheduler admits is not answered past the SLO.
	ReplyMargin time.Duration `yaml:"reply_margin"`
	// Static turns continuous batching off (a device takes new sequences
	// only once it runs none), for comparison.
	Static bool `yaml:"static"`
	// Cost is a step's time, base + per_token·tokens fed +
	// per_sample·tokens sampled + per_kv_token·KV tokens read: what the
	// scheduler predicts with and what an emulated step takes. A file that
	// names backend bytenet and leaves cost out predicts with
	// BytenetCPUCost, bytenet's own on the CPU.
	Cost GenCost `yaml:"cost"`
	// OutputLen is the emulated generator's output length (lognormal):
	// where the model ends a sequence, unless max_tokens ends it first.
	OutputLen GenLength `yaml:"output_len"`
}

// The generation backends (Generation.Backend).
const (
	GenBackendEmulated = "emulated"
	GenBackendBytenet  = "bytenet"
)

// GenCost is the generation cost model (gen.Cost).
type GenCost struct {
	Base       time.Duration `yaml:"base"`
	PerToken   time.Duration `yaml:"per_token"`
	PerSample  time.Duration `yaml:"per_sample"`
	PerKVToken time.Duration `yaml:"per_kv_token"`
}

// BytenetCPUCost is bytenet's generation step on the CPU (cudabridge.Gen),
// fitted to its benchmarks on the development VM: a decode (a token fed
// and one sampled) 6.26-6.40 µs greedy, 7.1-7.4 µs at temperature 1,
// whatever the batch (1 to 64 sequences) and the context (128 or 2,048);
// a 256-byte prefill chunk and its first token 12.1-12.3 µs. So a byte
// fed costs about 24 ns and a token sampled about 6.3 µs: sampling (the
// output layer over every byte) is the step, which a cost of one term per
// token fed (7 µs) mistook for a prefill a hundred times its cost. The
// sample is taken at 6.5 µs, between greedy and sampled decoding.
//
//	go test ./cudabridge -run '^$' -bench 'Gen(Decode|Prefill)' -benchtime 2000x
var BytenetCPUCost = gen.Cost{PerToken: 25 * time.Nanosecond, PerSample: 6500 * time.Nanosecond}

// GenLength is a lognormal length distribution (gen.Lognormal).
type GenLength struct {
	Median float64 `yaml:"median"`
	Sigma  float64 `yaml:"sigma"`
	Max    int     `yaml:"max"`
}

// defaultGeneration is off, with gen.DefaultConfig's values on one
// device and the simulator's reference output lengths (median 64, sigma
// 1, at most 1024).
func defaultGeneration() Generation {
	g := gen.DefaultConfig("tiny", "v1", 1)
	return Generation{
		Enabled: true, Backend: GenBackendEmulated,
		Models: []string{"tiny"}, Version: g.Version, Devices: g.Devices,
		BlockTokens: g.BlockTokens, BlocksPerDevice: g.BlocksPerDevice,
		StepTokensMax: g.StepTokensMax, SeqsMax: g.SeqsMax, WaitingMax: g.WaitingMax,
		PromptMax: g.PromptMax, TokensMax: g.TokensMax, TTFTSLO: g.TTFT, Timeout: g.Timeout,
		ReplyMargin: genReplyMargin,
		Cost:        GenCost(g.Cost),
		OutputLen:   GenLength{Median: 64, Sigma: 1, Max: 1024},
	}
}

// genReplyMargin is the default reply_margin: at 2,000 req/s on bytenet's
// CPU generator, with none, the clients' TTFT p99 was 0.47-0.59 ms past a
// 1 s SLO (RESULTS.md).
const genReplyMargin = time.Millisecond

// Limits on the generation section beyond the scheduler's own checks.
const (
	genModelsMax  = 64
	genDevicesMax = 1024
	genBlocksMax  = 1 << 24
	genTokensMax  = 1 << 20
)

// GenConfig is the schedulers' configuration (Model is set per model);
// every tenant's limits are the server's (tenants, default_tenant). The
// keys the file does not have are gen.DefaultConfig's, but for the
// admission headroom, at most an eighth of a device's blocks (so a small
// cache keeps most of it for admissions).
func (f *File) GenConfig() gen.Config {
	g := f.Generation
	c := gen.DefaultConfig("", g.Version, g.Devices)
	c.BlockTokens, c.BlocksPerDevice = g.BlockTokens, g.BlocksPerDevice
	c.StepTokensMax, c.SeqsMax, c.WaitingMax = g.StepTokensMax, g.SeqsMax, g.WaitingMax
	c.PromptMax, c.TokensMax = g.PromptMax, g.TokensMax
	c.TTFT, c.Timeout, c.Static, c.ReplyMargin = g.TTFTSLO, g.Timeout, g.Static, g.ReplyMargin
	c.AdmitHeadroomBlocks = min(c.AdmitHeadroomBlocks, g.BlocksPerDevice/8)
	c.Cost = gen.Cost(g.Cost)
	c.DefaultTenant = f.DefaultTenant.Config("")
	for _, t := range f.Tenants {
		c.Tenants = append(c.Tenants, t.Limits.Config(t.Name))
	}
	return c
}

// backendCost gives a file that serves generation on bytenet and names no
// cost bytenet's own (BytenetCPUCost), not the emulated model's default.
func (f *File) backendCost() {
	if f.Generation.Backend == GenBackendBytenet && !f.Has("generation.cost") {
		f.Generation.Cost = GenCost(BytenetCPUCost)
	}
}

// GenOutputLen is the emulated generator's output length distribution.
func (f *File) GenOutputLen() gen.Lognormal {
	l := f.Generation.OutputLen
	return gen.Lognormal{Median: l.Median, Sigma: l.Sigma, Max: l.Max}
}

func (v *validator) generation() {
	g := v.f.Generation
	if !g.Enabled {
		return
	}
	const p = "generation."
	if g.Backend != GenBackendEmulated && g.Backend != GenBackendBytenet {
		v.Bad(p+"backend", "%q: want %s or %s", g.Backend, GenBackendEmulated, GenBackendBytenet)
	}
	if len(g.Models) == 0 || len(g.Models) > genModelsMax {
		v.Bad(p+"models", "%d models: want 1 to %d", len(g.Models), genModelsMax)
	}
	seen := map[string]bool{}
	for i, m := range g.Models {
		switch {
		case m == "" || len(m) > 128:
			v.Bad(fmt.Sprintf("%smodels[%d]", p, i), "%q: want 1 to 128 bytes", m)
		case seen[m]:
			v.Bad(fmt.Sprintf("%smodels[%d]", p, i), "%q: listed twice", m)
		}
		seen[m] = true
	}
	if g.Version == "" {
		v.Bad(p+"version", "empty: name the models' version")
	}
	v.IntIn(p+"devices", g.Devices, 1, genDevicesMax)
	v.IntIn(p+"block_tokens", g.BlockTokens, 1, 1024)
	v.IntIn(p+"blocks_per_device", g.BlocksPerDevice, 1, genBlocksMax)
	v.IntIn(p+"seqs_max", g.SeqsMax, 1, 4096)
	v.IntIn(p+"step_tokens_max", g.StepTokensMax, max(g.SeqsMax, 1), genTokensMax)
	v.IntIn(p+"waiting_max", g.WaitingMax, 1, genTokensMax)
	v.IntIn(p+"prompt_max", g.PromptMax, 1, genTokensMax)
	v.IntIn(p+"tokens_max", g.TokensMax, 1, genTokensMax)
	v.DurIn(p+"ttft_slo", g.TTFTSLO, time.Millisecond, time.Hour)
	v.DurIn(p+"timeout", g.Timeout, max(g.TTFTSLO, time.Millisecond), 24*time.Hour)
	v.DurIn(p+"reply_margin", g.ReplyMargin, 0, g.TTFTSLO/2)
	v.DurIn(p+"cost.base", g.Cost.Base, 0, time.Minute)
	v.DurIn(p+"cost.per_token", g.Cost.PerToken, 0, time.Second)
	v.DurIn(p+"cost.per_sample", g.Cost.PerSample, 0, time.Second)
	v.DurIn(p+"cost.per_kv_token", g.Cost.PerKVToken, 0, time.Second)
	if g.Cost.Base+g.Cost.PerToken == 0 {
		v.Bad(p+"cost", "base and per_token both 0: a step would take no time")
	}
	l := g.OutputLen
	if !(l.Median >= 1 && l.Median <= genTokensMax) {
		v.Bad(p+"output_len.median", "%v: want 1 to %d", l.Median, genTokensMax)
	}
	if !(l.Sigma >= 0 && l.Sigma <= 10) {
		v.Bad(p+"output_len.sigma", "%v: want 0 to 10", l.Sigma)
	}
	v.IntIn(p+"output_len.max", l.Max, 1, genTokensMax)
	if v.Err() != nil {
		return
	}
	// The scheduler's own check is the backstop.
	c := v.f.GenConfig()
	c.Model = g.Models[0]
	if err := c.Validate(); err != nil {
		v.Bad("generation", "%v", err)
	}
}
