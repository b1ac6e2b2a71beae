package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/batchd/batchd/engine/loadgen"
)

// TestServeOverloadTwice is the chaos suite's overload, sized for a test: a
// real server (2 devices of 10 per 20 ms: 1,000 req/s) at three times its
// capacity, twice in a row. Every request gets a documented answer (200;
// 503 for what it sheds, which the generator counts rejected; 504 for an
// admitted request its deadline overtook), none a connection error or a
// wrong output, load is shed in both runs, and after each the server is
// ready and answers. The figures (goodput, rejection latency, memory) are
// `make overload`'s: timing belongs in measurements, not in tests.
func TestServeOverloadTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("overload: skipped with -short")
	}
	yaml := fmt.Sprintf("devices: {count: 2, latency: 20ms}\npolicy: {batch_max: 10}\njobs: {dir: %q}\n", t.TempDir())
	base, _ := startServe(t, yaml, io.Discard)
	for run := 1; run <= 2; run++ {
		cfg := loadgen.DefaultConfig()
		cfg.URL = base
		cfg.Rate = 3000
		cfg.Duration = 2 * time.Second
		rep, err := loadgen.Run(context.Background(), cfg)
		if err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		for code, n := range rep.Status {
			switch code {
			case "200", "503", "504":
			default:
				t.Errorf("run %d: %d answers %s", run, n, code)
			}
		}
		if len(rep.Errors) != 0 || rep.Requests.WrongOutput != 0 {
			t.Errorf("run %d: connection errors %v, %d wrong outputs", run, rep.Errors, rep.Requests.WrongOutput)
		}
		if rep.Requests.OK == 0 || rep.Requests.Rejected == 0 {
			t.Errorf("run %d: %d ok, %d shed; want both at 3x capacity", run, rep.Requests.OK, rep.Requests.Rejected)
		}
		resp, err := http.Get(base + "/v2/health/ready")
		if err != nil {
			t.Fatalf("run %d: ready: %v", run, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("run %d: ready answered %d after the overload", run, resp.StatusCode)
		}
		if code, r := infer(t, base, "echo", "after"); code != http.StatusOK {
			t.Errorf("run %d: infer after the overload: %d %+v", run, code, r)
		}
	}
}
