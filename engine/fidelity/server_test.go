package fidelity

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/sim"
)

// TestSimServerAgrees: the simulator's configuration built from a serve
// configuration runs the same batcher and devices as the live engine
// built from it (one mapping, f.BatcherConfig), and its traffic goes to
// the file's models and tenants.
func TestSimServerAgrees(t *testing.T) {
	for name, load := range map[string]func() (*config.File, error){
		"embedded": config.LoadEmbedded,
		"file":     func() (*config.File, error) { return config.LoadFile(filepath.Join("testdata", "serve.yaml")) },
	} {
		f, err := load()
		if err != nil {
			t.Fatal(err)
		}
		live, err := f.EngineConfig(nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg := sim.DefaultConfig()
		if err := SimServer(&cfg, f, true); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !reflect.DeepEqual(cfg.Batcher, live.Batcher) || !reflect.DeepEqual(cfg.Device, live.Device) || cfg.Devices != live.Devices {
			t.Errorf("%s: the simulated server differs from the live one:\n sim  %+v %+v %d\n live %+v %+v %d",
				name, cfg.Batcher, cfg.Device, cfg.Devices, live.Batcher, live.Device, live.Devices)
		}
		if !reflect.DeepEqual(cfg.Latency, live.Device.Latency) {
			t.Errorf("%s: latency %+v, want the devices' %+v", name, cfg.Latency, live.Device.Latency)
		}
		if cfg.Faults.ItemErrorRate != f.Devices.Faults.ItemErrorRate {
			t.Errorf("%s: fault plan %+v, want the file's rates %+v", name, cfg.Faults, f.Devices.Faults)
		}
		if len(cfg.Traffic.Mix) != len(f.Models) || cfg.Traffic.Mix[0].Model != f.Models[0].Name || cfg.Traffic.Mix[0].Version != "" {
			t.Errorf("%s: traffic mix %+v, want the registry's models, versions routed", name, cfg.Traffic.Mix)
		}
		if len(f.Tenants) > 0 && !reflect.DeepEqual(cfg.Traffic.Tenants, []string{"alice", "bob"}) {
			t.Errorf("%s: traffic tenants %v, want the listed ones", name, cfg.Traffic.Tenants)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
