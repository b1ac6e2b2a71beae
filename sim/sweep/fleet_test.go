package sweep

import (
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/sim"
)

// TestParseFleet: each key lands in the configuration; latency keeps a
// per-item cost given before or after it; a bad item is named.
func TestParseFleet(t *testing.T) {
	cfg := sim.DefaultConfig()
	if err := ParseFleet("latency-per-item=1ms, devices=9,latency=80ms,batch-max=32", &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Devices != 9 || cfg.Batcher.BatchMax != 32 || cfg.Latency.Base != 80*time.Millisecond || cfg.Latency.PerItem != time.Millisecond {
		t.Errorf("fleet: devices %d, batch max %d, latency %+v", cfg.Devices, cfg.Batcher.BatchMax, cfg.Latency)
	}
	for spec, want := range map[string]string{
		"devices=0":           "devices=0: want a positive integer",
		"gpus=4":              `unknown key "gpus"`,
		"devices=2,devices=3": "devices given twice",
		"latency=fast":        "latency=fast: want a positive duration",
		"devices":             "want key=value",
	} {
		if err := ParseFleet(spec, &cfg); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseFleet(%q): %v, want %q", spec, err, want)
		}
	}
}
