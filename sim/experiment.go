package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
)

// The experiments of the batching-policy study, as configurations: each is measured by a test
// (burst_test.go) and can be rerun from the command line with
// `batchd sim --experiment NAME` (see Experiments).

// BurstConfig is the seeds' hard case: tenants "steady-a" and "steady-b"
// each send 400 req/s of short inputs (16-64 bytes) for 60 s, while tenant
// "burst" sends 2,000 req/s of long inputs (2-4 KB) from 20 s to 40 s.
// One model, "m", with length buckets at 64, 256, 1024 and 4096 bytes, so
// the burst fills a bucket (the last) that no one else uses. Eight devices
// with an affine latency model that charges for padding: a batch costs
// 40 ms + 0.1 ms per item + 250 ns per padded byte, so a full batch of
// short inputs costs about 52 ms and one of 4 KB inputs about 152 ms. The
// SLO is the default 200 ms.
//
// With quota, the burst tenant is limited to 1,000 req/s (burst 200) and
// 300 requests in flight; without, it has no limit. policy is the
// batcher's KeyPolicy. The report's Windows split the run at 20 s and
// 40 s.
func BurstConfig(policy actors.KeyPolicy, quota bool) Config {
	cfg := DefaultConfig()
	cfg.Seed = 1
	cfg.Devices = 8
	cfg.Duration = 60 * time.Second
	cfg.Latency = actors.LatencyModel{Base: 40 * time.Millisecond, PerItem: 100 * time.Microsecond, PerPaddedByte: 250}
	b := &cfg.Batcher
	b.KeyPolicy = policy
	b.Models = []actors.ModelConfig{{
		Name:        "m",
		Versions:    []actors.VersionConfig{{Name: "v1", Weight: 1}},
		BucketEdges: []int{64, 256, 1024, 4096},
	}}
	b.Tenants = []actors.TenantConfig{{Name: "steady-a", Weight: 1}, {Name: "steady-b", Weight: 1}, {Name: "burst", Weight: 1}}
	if quota {
		b.Tenants[2].Rate, b.Tenants[2].Burst, b.Tenants[2].InflightMax = 1000, 200, 300
	}
	steady := func(tenant string) TrafficConfig {
		t := DefaultTrafficConfig()
		t.Rate = 400
		t.Tenants = []string{tenant}
		t.Mix = []ModelMix{{Model: "m", Weight: 1}}
		return t
	}
	burst := steady("burst")
	burst.Rate = 2000
	burst.InputLenMin, burst.InputLenMax = 2048, 4096
	burst.Start, burst.Stop = 20*time.Second, 40*time.Second
	cfg.Sources = []TrafficConfig{steady("steady-a"), steady("steady-b"), burst}
	cfg.Windows = []time.Duration{0, 20 * time.Second, 40 * time.Second, 60 * time.Second}
	return cfg
}

// MergeConfig is traffic fragmented over length buckets: 600 req/s of one
// model for 60 s, inputs of 1 to 1,024 bytes, uniformly, under bucket
// edges at 32, 64, 128, 256 and 512 bytes (six buckets; half the traffic
// lands in the last, the shortest bucket sees about 19 req/s). Four devices; a
// batch costs 40 ms + 0.2 ms per item + 500 ns per padded byte (a full
// batch of 1 KB inputs about 111 ms, of 32-byte ones about 62 ms). merge
// switches BucketMerge.
func MergeConfig(merge bool) Config {
	cfg := DefaultConfig()
	cfg.Devices = 4
	cfg.Duration = 60 * time.Second
	cfg.Latency = actors.LatencyModel{Base: 40 * time.Millisecond, PerItem: 200 * time.Microsecond, PerPaddedByte: 500}
	b := &cfg.Batcher
	b.BucketMerge = merge
	b.Models = []actors.ModelConfig{{
		Name:        "m",
		Versions:    []actors.VersionConfig{{Name: "v1", Weight: 1}},
		BucketEdges: []int{32, 64, 128, 256, 512},
	}}
	t := DefaultTrafficConfig()
	t.Rate = 600
	t.Mix = []ModelMix{{Model: "m", Weight: 1}}
	t.InputLenMin, t.InputLenMax = 1, 1024
	cfg.Sources = []TrafficConfig{t}
	return cfg
}

// FragmentModels is the number of models FragmentConfig spreads its
// traffic over.
const FragmentModels = 40

// FragmentConfig is the autoscaling experiment: 2,000 req/s in all, for
// 30 s, on eight devices with the seeds' fixed 100 ms batches, either on
// one model or spread evenly over FragmentModels models (50 req/s each),
// whose requests can never share a batch. On one model the batcher's eager
// dispatch (a free device takes what has gathered within a linger of
// compute/devices) keeps every device busy with batches of about 26, so
// utilisation reads high though three devices would do; spread over 40
// models, batches of 5 or 6 need far more devices than there are.
func FragmentConfig(fragmented bool) Config {
	cfg := DefaultConfig()
	cfg.Devices = 8
	cfg.Duration = 30 * time.Second
	t := DefaultTrafficConfig()
	t.Rate = 2000
	t.Mix = []ModelMix{{Model: "m0", Weight: 1}}
	if fragmented {
		t.Mix = nil
		for i := range FragmentModels {
			t.Mix = append(t.Mix, ModelMix{Model: fmt.Sprintf("m%d", i), Weight: 1})
		}
	}
	cfg.Sources = []TrafficConfig{t}
	return cfg
}

// BurstOverloadConfig is BurstConfig with the burst at 8,000 req/s: alone
// it asks for about one and a half times the fleet (a full batch of 4 KB
// inputs takes 152 ms, so eight devices serve about 5,300 a second).
func BurstOverloadConfig(policy actors.KeyPolicy, quota bool) Config {
	cfg := BurstConfig(policy, quota)
	cfg.Sources[2].Rate = 8000
	return cfg
}

// experiments names the configurations `batchd sim --experiment` runs.
var experiments = map[string]func() Config{
	"burst-fair-quota":           func() Config { return BurstConfig(actors.PolicyFair, true) },
	"burst-fair-none":            func() Config { return BurstConfig(actors.PolicyFair, false) },
	"burst-slack-quota":          func() Config { return BurstConfig(actors.PolicySlack, true) },
	"burst-slack-none":           func() Config { return BurstConfig(actors.PolicySlack, false) },
	"burst-overload-fair-quota":  func() Config { return BurstOverloadConfig(actors.PolicyFair, true) },
	"burst-overload-fair-none":   func() Config { return BurstOverloadConfig(actors.PolicyFair, false) },
	"burst-overload-slack-quota": func() Config { return BurstOverloadConfig(actors.PolicySlack, true) },
	"burst-overload-slack-none":  func() Config { return BurstOverloadConfig(actors.PolicySlack, false) },
	"merge-off":                  func() Config { return MergeConfig(false) },
	"merge-on":                   func() Config { return MergeConfig(true) },
	"fragment-one-key":           func() Config { return FragmentConfig(false) },
	"fragment-40":                func() Config { return FragmentConfig(true) },
}

// Experiments returns the names Experiment knows, sorted.
func Experiments() []string {
	names := make([]string, 0, len(experiments))
	for n := range experiments {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Experiment returns the named experiment's configuration.
func Experiment(name string) (Config, bool) {
	f, ok := experiments[name]
	if !ok {
		return Config{}, false
	}
	return f(), true
}
