package config

import (
	"strings"
	"testing"
	"time"
)

// TestGeneration: the generation section maps onto the scheduler's
// configuration, the server's tenants included, and its mistakes are
// errors naming the key (checked only when it is enabled).
func TestGeneration(t *testing.T) {
	f, err := Load("gen.yaml", []byte(`
generation:
  enabled: true
  models: [a, b]
  devices: 2
  block_tokens: 8
  blocks_per_device: 100
  ttft_slo: 250ms
  static: true
  cost: {base: 2ms, per_token: 0s, per_kv_token: 0s}
tenants:
  - {name: alice, api_key: alice-key-1, in_flight_max: 3}
`))
	if err != nil {
		t.Fatal(err)
	}
	if f.Generation.Backend != GenBackendEmulated {
		t.Errorf("backend %q, want the default %q", f.Generation.Backend, GenBackendEmulated)
	}
	if b, err := Load("bytenet.yaml", []byte("generation:\n  enabled: true\n  backend: bytenet\n")); err != nil || b.Generation.Backend != GenBackendBytenet {
		t.Errorf("backend bytenet: %v", err)
	}
	c := f.GenConfig()
	if c.Devices != 2 || c.BlockTokens != 8 || c.BlocksPerDevice != 100 || c.TTFT != 250*time.Millisecond || !c.Static ||
		c.Cost.Base != 2*time.Millisecond || len(c.Tenants) != 1 || c.Tenants[0].InflightMax != 3 {
		t.Errorf("GenConfig %+v", c)
	}
	if d, err := LoadEmbedded(); err != nil || !d.Generation.Enabled || len(d.Generation.Models) == 0 {
		t.Errorf("generation is on by default, with a model: %+v, %v", d.Generation, err)
	}
	if d, _ := LoadEmbedded(); d.GenConfig().ReplyMargin != time.Millisecond {
		t.Errorf("the embedded default's scheduler holds back %v for the reply, want 1ms", d.GenConfig().ReplyMargin)
	}
	if _, err := Load("off.yaml", []byte("generation:\n  enabled: false\n  models: []\n")); err != nil {
		t.Errorf("a disabled section is not checked: %v", err)
	}
	for _, c := range []struct{ yaml, want string }{
		{"generation:\n  enabled: true\n  models: []\n", "generation.models: 0 models"},
		{"generation:\n  enabled: true\n  backend: gpu\n", `generation.backend: "gpu": want emulated or bytenet`},
		{"generation:\n  enabled: true\n  models: [a, a]\n", `generation.models[1]: "a": listed twice`},
		{"generation:\n  enabled: true\n  seqs_max: 64\n  step_tokens_max: 8\n", "generation.step_tokens_max: 8"},
		{"generation:\n  enabled: true\n  cost: {base: 0s, per_token: 0s}\n", "generation.cost: base and per_token both 0"},
		{"generation:\n  enabled: true\n  cost: {per_sample: -1us}\n", "generation.cost.per_sample"},
		{"generation:\n  enabled: true\n  output_len: {median: 0}\n", "generation.output_len.median"},
		{"generation:\n  enabled: true\n  ttft_slo: 2s\n  timeout: 1s\n", "generation.timeout: 1s"},
		{"generation:\n  enabled: true\n  reply_margin: -1ms\n", "generation.reply_margin"},
		{"generation:\n  enabled: true\n  ttft_slo: 10ms\n  reply_margin: 6ms\n", "generation.reply_margin: 6ms"},
	} {
		_, err := Load("bad.yaml", []byte(c.yaml))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.yaml, err, c.want)
		}
	}
}

// TestGenerationBackendCost: a file that serves bytenet and names no cost
// predicts with bytenet's own (BytenetCPUCost, where feeding a byte is
// about 250 times cheaper than sampling a token), not the emulated
// model's 8 ms steps; one that names a cost, even in part, keeps it over
// the defaults; and the emulated backend keeps its default.
func TestGenerationBackendCost(t *testing.T) {
	f, err := Load("bytenet.yaml", []byte("generation:\n  enabled: true\n  backend: bytenet\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.GenConfig().Cost; c != BytenetCPUCost {
		t.Errorf("bytenet without a cost predicts with %+v, want bytenet's own %+v", c, BytenetCPUCost)
	}
	if BytenetCPUCost.PerSample < 100*BytenetCPUCost.PerToken {
		t.Errorf("BytenetCPUCost %+v: a sample should cost hundreds of bytes fed", BytenetCPUCost)
	}
	f, err = Load("bytenet.yaml", []byte("generation:\n  enabled: true\n  backend: bytenet\n  cost: {per_sample: 9us}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := Default().Generation.Cost
	want.PerSample = 9 * time.Microsecond
	if c := f.GenConfig().Cost; GenCost(c) != want {
		t.Errorf("bytenet with a cost predicts with %+v, want the file's over the defaults %+v", c, want)
	}
	f, err = Load("emulated.yaml", []byte("generation:\n  enabled: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c := f.GenConfig().Cost; GenCost(c) != Default().Generation.Cost || c.PerSample != 0 {
		t.Errorf("emulated predicts with %+v, want the default %+v", c, Default().Generation.Cost)
	}
}
