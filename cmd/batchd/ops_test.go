package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// gauge reads one unlabelled series from base's /metrics; ok is false when
// the series is not there.
func gauge(t *testing.T, base, name string) (v float64, ok bool) {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return v, true
		}
	}
	return 0, false
}

// autoscaleYAML serves with one device of 100 ms per batch (1,000 req/s at
// batches of 100) and the autoscaling policy reading the signals every
// 20 ms, with no cooldown between its decisions.
const autoscaleYAML = `
devices:
  count: 1
  latency: 100ms
autoscale:
  devices_min: 1
  devices_max: 8
  cooldown: 0s
  every: 20ms
`

// TestServeAutoscaleRecommendation: with autoscale in the config, /metrics
// exports the policy's recommendation, which starts at the node's one
// device and rises under load (a few hundred requests a second, each
// gathered within half its slack, need more than one device at the
// target utilisation), with a decision up counted; /v1/stats says the same.
func TestServeAutoscaleRecommendation(t *testing.T) {
	base, _ := startServe(t, autoscaleYAML, io.Discard)
	if v, ok := gauge(t, base, "batchd_autoscale_devices_recommended"); !ok || v != 1 {
		t.Fatalf("before load: batchd_autoscale_devices_recommended %v (present %v), want 1", v, ok)
	}
	if v, ok := gauge(t, base, "batchd_autoscale_devices_current"); !ok || v != 1 {
		t.Fatalf("batchd_autoscale_devices_current %v (present %v), want 1", v, ok)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/models/echo/infer", strings.NewReader(fmt.Sprintf(`{"input":"load-%d"}`, i)))
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	var rec float64
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		rec, _ = gauge(t, base, "batchd_autoscale_devices_recommended")
		if rec >= 2 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("under load for 30 s, batchd_autoscale_devices_recommended stayed %v, want at least 2", rec)
		}
	}
	t.Logf("recommendation under load: %v devices", rec)
	cancel()
	wg.Wait()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if m := regexp.MustCompile(`batchd_autoscale_decisions_total\{direction="up"\} (\d+)`).FindSubmatch(text); m == nil || string(m[1]) == "0" {
		t.Errorf("no decision up counted:\n%s", text)
	}
	var st struct {
		Autoscale *struct{ Recommended, Current int }
	}
	if code := getJSON(t, base+"/v1/stats", &st); code != http.StatusOK {
		t.Fatalf("/v1/stats: %d", code)
	}
	if st.Autoscale == nil || st.Autoscale.Current != 1 || st.Autoscale.Recommended < 2 {
		t.Errorf("/v1/stats autoscale %+v, want current 1 and recommended at least 2", st.Autoscale)
	}
}

// chromium finds a headless-capable Chromium, or skips saying how to get
// one.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no chromium on PATH: `make test` installs Debian's (engine/httpapi/install-chromium.sh) where apt and root allow; skipping the status page's browser test")
	return ""
}

// TestServeStatusPage loads GET / of a live server in headless Chromium,
// after some traffic, and reads the figures the page's script drew into
// the DOM: the recent latency (the very figures /v1/stats gives, as the
// page formats them), one row per device with its state (device 0 crashes
// every batch, so it is quarantined after its second), the model's queue,
// and the autoscaling recommendation.
func TestServeStatusPage(t *testing.T) {
	browser := chromium(t)
	base, _ := startServe(t, `
devices:
  count: 3
  latency: 100ms
  restart_backoff: 1ms
  quarantine_after: 2
  quarantine_for: 1h
  faults:
    crash_rate: 1
    healthy_devices: 2
autoscale:
  every: 50ms
`, io.Discard)
	// Traffic until device 0 has crashed into quarantine (its batches are
	// retried on the others).
	var st struct {
		Devices []struct{ Device, State string }
		Latency struct {
			Count int     `json:"count"`
			P50   float64 `json:"p50_ms"`
			P95   float64 `json:"p95_ms"`
			P99   float64 `json:"p99_ms"`
		} `json:"latency"`
	}
	quarantined := func() bool {
		for _, d := range st.Devices {
			if d.State == "quarantined" {
				return d.Device == "0"
			}
		}
		return false
	}
	for end := time.Now().Add(30 * time.Second); ; {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// A request in device 0's crashed batch may run out of
				// time before its retry ends: 504.
				if code, _ := infer(t, base, "echo", fmt.Sprintf("page-%d", i)); code != http.StatusOK && code != http.StatusGatewayTimeout {
					t.Errorf("infer: %d", code)
				}
			}()
		}
		wg.Wait()
		if code := getJSON(t, base+"/v1/stats", &st); code != http.StatusOK {
			t.Fatalf("/v1/stats: %d", code)
		}
		if quarantined() {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("device 0 not quarantined after 30 s of traffic: %+v", st.Devices)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// As root (a container, CI) Chromium runs only without its sandbox.
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=3000", "--dump-dom", base+"/")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, tail(stderr.String(), 2000))
	}
	dom := string(out)
	text := func(id string) string {
		m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("no element %s in the DOM:\n%s", id, dom)
		}
		return m[1]
	}
	// No traffic since: /v1/stats, read after the last request, gives
	// what the page drew.
	if st.Latency.Count < 20 || st.Latency.P50 < 100 {
		t.Fatalf("/v1/stats latency %+v: want 20 requests or more, of at least the 100 ms batch", st.Latency)
	}
	for id, v := range map[string]float64{"lat-p50": st.Latency.P50, "lat-p95": st.Latency.P95, "lat-p99": st.Latency.P99} {
		if got, want := text(id), fmt.Sprintf("%.1f ms", v); got != want {
			t.Errorf("%s: the page shows %q, /v1/stats says %q", id, got, want)
		}
	}
	if got, want := text("lat-count"), fmt.Sprintf("%d in 60 s", st.Latency.Count); got != want {
		t.Errorf("lat-count %q, want %q", got, want)
	}
	if got := text("devices-healthy"); got != "2" {
		t.Errorf("devices-healthy %q, want 2", got)
	}
	if got := text("as-recommended"); !regexp.MustCompile(`^\d+ of 3$`).MatchString(got) {
		t.Errorf("as-recommended %q, want \"N of 3\"", got)
	}
	rows := regexp.MustCompile(`<tr class="device" data-state="(busy|idle|quarantined)"><td>(\d+)</td>`).FindAllStringSubmatch(dom, -1)
	if len(rows) != 3 || rows[0][2] != "0" || rows[0][1] != "quarantined" || rows[1][1] == "quarantined" || rows[2][2] != "2" || rows[2][1] == "quarantined" {
		t.Errorf("device rows %v, want devices 0 (quarantined), 1 and 2 (busy or idle)", rows)
	}
	if !regexp.MustCompile(`<tr class="key"><td>echo</td><td>v1</td><td>0</td><td>\d+</td>`).MatchString(dom) {
		t.Errorf("no queue row for echo v1 in the DOM:\n%s", dom)
	}
	if got := text("error"); got != "" {
		t.Errorf("the page shows an error: %q", got)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
