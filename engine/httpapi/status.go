package httpapi

import (
	"cmp"
	"context"
	_ "embed"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/batchd/batchd/actors"
)

// statusPage is GET /: one HTML file, its script and style inline, that
// polls /v1/stats and draws the devices, the keys' queues, the recent
// latency and the autoscaling recommendation. No external assets.
//
//go:embed status.html
var statusPage []byte

// statusWindow is the span of the recent latency /v1/stats reports.
const statusWindow = time.Minute

// statusKeysMax bounds the keys /v1/stats lists: the deepest first.
const statusKeysMax = 100

// statsResponse is /v1/stats.
type statsResponse struct {
	// Time is when it was taken (RFC 3339, UTC).
	Time string `json:"time"`
	// Signals says whether the batcher answered; without it, the devices,
	// keys and signal figures are absent and SignalsError says why.
	Signals        bool            `json:"signals"`
	SignalsError   string          `json:"signals_error,omitempty"`
	DevicesHealthy int             `json:"devices_healthy"`
	DevicesNeeded  int             `json:"devices_needed"`
	WaitPredicted  float64         `json:"wait_predicted_ms"`
	Devices        []statsDevice   `json:"devices"`
	Keys           []statsKey      `json:"keys"`
	KeysTotal      int             `json:"keys_total"`
	Latency        statsLatency    `json:"latency"`
	Autoscale      *statsAutoscale `json:"autoscale"`
}

type statsDevice struct {
	// Device is its label in /metrics: its index, from 0.
	Device string `json:"device"`
	// State is busy (a batch on it), idle, or quarantined.
	State        string  `json:"state"`
	BusyFraction float64 `json:"busy_fraction"`
	// Busy is the time spent on batches since registration, seconds: the
	// page takes its rate between two polls.
	Busy float64 `json:"busy_s"`
}

type statsKey struct {
	Model   string `json:"model"`
	Version string `json:"version"`
	Bucket  int    `json:"bucket"`
	Depth   int    `json:"depth"`
	// WaitOldest and SlackMin are of the queued requests; SlackMin is
	// null with none queued (negative: late).
	WaitOldest    float64  `json:"wait_oldest_ms"`
	SlackMin      *float64 `json:"slack_min_ms"`
	Rate          float64  `json:"rate"`
	BatchSizeMean float64  `json:"batch_size_mean"`
}

type statsLatency struct {
	WindowS float64 `json:"window_s"`
	Count   int     `json:"count"`
	P50     float64 `json:"p50_ms"`
	P95     float64 `json:"p95_ms"`
	P99     float64 `json:"p99_ms"`
}

type statsAutoscale struct {
	Recommended int    `json:"recommended"`
	Current     int    `json:"current"`
	Up          uint64 `json:"decisions_up"`
	Down        uint64 `json:"decisions_down"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// status serves GET /: the status page.
func (h *Handler) status(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Content-Type", "text/html; charset=utf-8")
	hd.Set("Cache-Control", "no-store")
	// Its own inline script and style, and requests to this server only.
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'")
	hd.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(statusPage)
	}
}

// stats serves GET /v1/stats, what the status page draws: the batcher's
// signals, the recent latency, the autoscaling recommendation. It names
// models and devices as /metrics does, so the same rule says who reads it.
func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	if aerr := h.metricsAuth(r); aerr != nil {
		h.fail(w, r, aerr)
		return
	}
	resp := statsResponse{Time: time.Now().UTC().Format(time.RFC3339Nano), Devices: []statsDevice{}, Keys: []statsKey{}}
	rec := h.met.Recent(statusWindow)
	resp.Latency = statsLatency{WindowS: rec.Window.Seconds(), Count: rec.Count, P50: ms(rec.P50), P95: ms(rec.P95), P99: ms(rec.P99)}
	if a := h.cfg.Autoscale; a != nil {
		up, down := a.Decisions()
		resp.Autoscale = &statsAutoscale{Recommended: a.DevicesRecommended(), Current: a.DevicesCurrent(), Up: up, Down: down}
	}
	if h.cfg.Signals == nil {
		resp.SignalsError = "no signals configured"
		h.writeJSON(w, r, http.StatusOK, resp)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.ScrapeTimeout)
	s, err := h.cfg.Signals(ctx)
	cancel()
	if err != nil {
		resp.SignalsError = err.Error()
		h.writeJSON(w, r, http.StatusOK, resp)
		return
	}
	resp.Signals = true
	resp.DevicesHealthy, resp.DevicesNeeded, resp.WaitPredicted = s.DevicesHealthy, s.DevicesNeeded, ms(s.WaitPredicted)
	index := make(map[actors.Address]int, len(h.cfg.Devices))
	for i, a := range h.cfg.Devices {
		if _, ok := index[a]; !ok {
			index[a] = i
		}
	}
	devs := slices.Clone(s.Devices)
	at := func(a actors.Address) int {
		if i, ok := index[a]; ok {
			return i
		}
		return len(index)
	}
	slices.SortStableFunc(devs, func(a, b actors.DeviceSignal) int { return cmp.Compare(at(a.Device), at(b.Device)) })
	for _, d := range devs {
		name := "addr-" + strconv.FormatUint(d.Device.ID, 10)
		if i, ok := index[d.Device]; ok {
			name = strconv.Itoa(i)
		}
		state := "idle"
		switch {
		case !d.Healthy:
			state = "quarantined"
		case d.Running:
			state = "busy"
		}
		resp.Devices = append(resp.Devices, statsDevice{Device: name, State: state, BusyFraction: d.BusyFraction, Busy: d.Busy.Seconds()})
	}
	keys := slices.Clone(s.Keys)
	slices.SortStableFunc(keys, func(a, b actors.KeySignal) int { return cmp.Compare(b.Depth, a.Depth) })
	resp.KeysTotal = len(keys)
	for _, k := range keys[:min(len(keys), statusKeysMax)] {
		sk := statsKey{Model: k.Key.Model, Version: k.Key.Version, Bucket: k.Key.Bucket, Depth: k.Depth,
			WaitOldest: ms(k.WaitOldest), Rate: k.Rate, BatchSizeMean: k.BatchSizeMean}
		if k.Depth > 0 {
			v := ms(k.SlackMin)
			sk.SlackMin = &v
		}
		resp.Keys = append(resp.Keys, sk)
	}
	h.writeJSON(w, r, http.StatusOK, resp)
}
