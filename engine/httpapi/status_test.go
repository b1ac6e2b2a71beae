package httpapi_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine/httpapi"
)

// fakeScale is a fixed autoscaling recommendation.
type fakeScale struct{}

func (fakeScale) DevicesRecommended() int      { return 5 }
func (fakeScale) DevicesCurrent() int          { return 2 }
func (fakeScale) Decisions() (up, down uint64) { return 3, 1 }

func statusConfig() httpapi.Config {
	cfg := httpapi.DefaultConfig()
	cfg.Devices = []actors.Address{{ID: 16}, {ID: 17}, {ID: 18}}
	cfg.Autoscale = fakeScale{}
	cfg.Signals = func(context.Context) (actors.Signals, error) {
		return actors.Signals{
			Keys: []actors.KeySignal{
				{Key: actors.Key{Model: "m", Version: "v1"}, Rate: 3},
				{Key: actors.Key{Model: "m", Version: "v2", Bucket: 64}, Depth: 7, WaitOldest: 40 * time.Millisecond, SlackMin: -2 * time.Millisecond, Rate: 100, BatchSizeMean: 20},
			},
			// In the batcher's order, not the devices'.
			Devices: []actors.DeviceSignal{
				{Device: actors.Address{ID: 18}, BusyFraction: 0.5, Busy: 1500 * time.Millisecond, Running: true, Healthy: true},
				{Device: actors.Address{ID: 16}, Healthy: true},
				{Device: actors.Address{ID: 17}, Running: true},
			},
			DevicesNeeded: 4, DevicesHealthy: 2, WaitPredicted: 250 * time.Millisecond,
		}, nil
	}
	return cfg
}

// TestStats: /v1/stats carries the signals as the status page draws them:
// devices in their order with their state (quarantined over busy), keys
// deepest first with the least slack only where requests are queued, the
// recent latency of completed requests, the recommendation.
func TestStats(t *testing.T) {
	f := &fakeDoer{}
	h := newHandler(t, f, statusConfig())
	for range 10 {
		if r := serve(h, "POST", "/v1/models/m/infer", `{"input": "x"}`); r.status != 200 {
			t.Fatalf("infer: %d %s", r.status, r.body)
		}
	}
	r := serve(h, "GET", "/v1/stats", "")
	if r.status != 200 {
		t.Fatalf("stats: %d %s", r.status, r.body)
	}
	var got struct {
		Signals        bool
		DevicesHealthy int     `json:"devices_healthy"`
		DevicesNeeded  int     `json:"devices_needed"`
		WaitPredicted  float64 `json:"wait_predicted_ms"`
		Devices        []struct {
			Device, State string
			Busy          float64 `json:"busy_s"`
		}
		Keys []struct {
			Model, Version string
			Bucket, Depth  int
			SlackMin       *float64 `json:"slack_min_ms"`
		}
		KeysTotal int `json:"keys_total"`
		Latency   struct {
			Count int
		}
		Autoscale *struct {
			Recommended, Current int
			Up                   uint64 `json:"decisions_up"`
		}
	}
	if err := json.Unmarshal(r.body, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Signals || got.DevicesHealthy != 2 || got.DevicesNeeded != 4 || got.WaitPredicted != 250 {
		t.Errorf("signals: %s", r.body)
	}
	var devs []string
	for _, d := range got.Devices {
		devs = append(devs, d.Device+":"+d.State)
	}
	if strings.Join(devs, " ") != "0:idle 1:quarantined 2:busy" || got.Devices[2].Busy != 1.5 {
		t.Errorf("devices %v (busy %+v), want 0:idle 1:quarantined 2:busy", devs, got.Devices)
	}
	if len(got.Keys) != 2 || got.KeysTotal != 2 || got.Keys[0].Version != "v2" || got.Keys[0].Depth != 7 || got.Keys[0].Bucket != 64 ||
		got.Keys[0].SlackMin == nil || *got.Keys[0].SlackMin != -2 || got.Keys[1].SlackMin != nil {
		t.Errorf("keys: %s", r.body)
	}
	// The fake engine's clock stands still: the percentiles are the
	// metrics package's test's.
	if got.Latency.Count != 10 {
		t.Errorf("latency: %s", r.body)
	}
	if got.Autoscale == nil || got.Autoscale.Recommended != 5 || got.Autoscale.Current != 2 || got.Autoscale.Up != 3 {
		t.Errorf("autoscale: %s", r.body)
	}
}

// TestStatsAuth: /v1/stats names models and devices, so it follows
// /metrics' rule: with API keys, only the metrics key reads it.
func TestStatsAuth(t *testing.T) {
	cfg := statusConfig()
	cfg.APIKeys = []httpapi.APIKey{{Key: "tenant-key", Tenant: "acme"}}
	cfg.MetricsKey = "metrics-key"
	h := newHandler(t, &fakeDoer{}, cfg)
	if r := serve(h, "GET", "/v1/stats", "", "Authorization", "Bearer tenant-key"); r.status != 401 {
		t.Errorf("tenant's key: %d, want 401", r.status)
	}
	if r := serve(h, "GET", "/v1/stats", "", "Authorization", "Bearer metrics-key"); r.status != 200 {
		t.Errorf("metrics key: %d, want 200", r.status)
	}
}

// TestStatusPage: GET / is the page, self-contained (no URL it loads but
// /v1/stats), under a policy that allows nothing else; other paths are
// still 404.
func TestStatusPage(t *testing.T) {
	h := newHandler(t, &fakeDoer{}, statusConfig())
	r := serve(h, "GET", "/", "")
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") {
		t.Fatalf("GET /: %d %q", r.status, r.header.Get("Content-Type"))
	}
	page := string(r.body)
	for _, want := range []string{`id="lat-p99"`, `id="devices"`, `id="keys"`, `fetch("/v1/stats"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, bad := range []string{"http://", "https://", "src=", "<link"} {
		if strings.Contains(page, bad) {
			t.Errorf("page loads something (%q): it must be self-contained", bad)
		}
	}
	if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("CSP %q", csp)
	}
	if r := serve(h, "GET", "/nope", ""); r.status != 404 {
		t.Errorf("GET /nope: %d, want 404", r.status)
	}
	if r := serve(h, "POST", "/", `{}`); r.status != 405 {
		t.Errorf("POST /: %d, want 405", r.status)
	}
}

// TestMetricsAutoscale: the recommendation, the fleet and the decisions are
// series; the devices' busy time is a counter.
func TestMetricsAutoscale(t *testing.T) {
	h := newHandler(t, &fakeDoer{}, statusConfig())
	text := string(serve(h, "GET", "/metrics", "").body)
	for _, want := range []string{
		"batchd_autoscale_devices_recommended 5",
		"batchd_autoscale_devices_current 2",
		`batchd_autoscale_decisions_total{direction="up"} 3`,
		`batchd_autoscale_decisions_total{direction="down"} 1`,
		"# TYPE batchd_device_busy_seconds_total counter",
		`batchd_device_busy_seconds_total{device="2"} 1.5`,
		"batchd_queue_wait_predicted_seconds 0.25",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}
