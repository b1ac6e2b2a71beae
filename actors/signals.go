package actors

import (
	"math"
	"slices"
	"time"
)

// keySignals are a key's running measures.
type keySignals struct {
	// Arrivals are counted per window of SignalWindow.
	arrivals
	// sizes holds the last batch sizes, a ring.
	sizes  [16]int
	nSizes int
}

// arrivals counts arrivals per window: cur in the window that began at
// curStart, prev in the one before.
type arrivals struct {
	cur, prev int
	curStart  time.Duration
}

func (s *arrivals) roll(now, window time.Duration) {
	if now < s.curStart+window {
		return
	}
	s.prev = s.cur
	if now >= s.curStart+2*window {
		s.prev = 0
	}
	s.cur = 0
	s.curStart = now - (now-s.curStart)%window
}

func (s *arrivals) arrival(now, window time.Duration) {
	s.roll(now, window)
	s.cur++
}

// rateNow is the arrival rate over the last window, sliding: the previous
// window's count weighted by how much of it the last window still covers.
func (s *arrivals) rateNow(now, window time.Duration) float64 {
	s.roll(now, window)
	f := float64(now-s.curStart) / float64(window)
	return (float64(s.prev)*(1-f) + float64(s.cur)) / window.Seconds()
}

func (s *keySignals) batch(n int) {
	s.sizes[s.nSizes%len(s.sizes)] = n
	s.nSizes++
}

// Signals is the batcher's view of its load, for metrics and autoscaling.
type Signals struct {
	Keys    []KeySignal
	Devices []DeviceSignal
	// DevicesNeeded is the autoscaling recommendation; see
	// Batcher.Signals.
	DevicesNeeded int
	// DevicesHealthy counts registered devices that are not quarantined.
	DevicesHealthy int
	// WaitPredicted is the queue wait predicted for a full batch that
	// joined the queues now: behind every batch already queued (full
	// batches of each key, and its remainder), on the devices' predicted
	// free times. Zero while an idle device would take it at once. It is
	// the leading indicator an autoscaler reads (see Autoscaler): it rises
	// as soon as the queues outgrow the fleet, before any request is late.
	WaitPredicted time.Duration
	// Overrun is what the batcher adds to every batch it plans with, learnt
	// from how long its batches ran (BatcherConfig.LearnOverrun); 0
	// without it.
	Overrun time.Duration
	// SuspectsCapped: the batches of suspect tenants (those that sent
	// TenantSuspectAfter distinct poison inputs) hold their most of the
	// devices (SuspectDevicesDiv) while another tenant's requests wait,
	// and their other requests wait.
	SuspectsCapped bool
}

// KeySignal describes one key's queue.
type KeySignal struct {
	Key Key
	// Depth is the number of requests queued.
	Depth int
	// WaitOldest is how long the oldest queued request has waited.
	WaitOldest time.Duration
	// SlackMin is the least slack of a queued request (negative: late).
	SlackMin time.Duration
	// Rate is the recent arrival rate, per second.
	Rate float64
	// BatchSizeMean is the mean size of the key's recent batches.
	BatchSizeMean float64
	// DevicesNeeded is this key's share of the recommendation.
	DevicesNeeded float64
}

// DeviceSignal describes one device.
type DeviceSignal struct {
	Device Address
	// BusyFraction is the share of time since registration spent on
	// batches.
	BusyFraction float64
	// Busy is the time spent on batches since registration (the running
	// batch's so far included): a counter a dashboard takes the rate of.
	Busy time.Duration
	// Running says a batch is on the device now.
	Running bool
	Healthy bool
}

// Signals returns the signals and the autoscaling recommendation. The
// recommendation is computed per key from its arrival rate λ and the cost
// model, not from device utilisation: within half of its slack budget
// W = (SLO - compute - margin)/2 (the other half is headroom for queueing),
// a key can gather b = clamp(λ·W, 1, BatchMax) requests per batch, so it
// needs λ/b batches per second, each costing the predicted compute of b.
// Keys add up; the sum is divided by TargetUtilization. Traffic spread over
// many keys gathers small batches and so needs more devices even while the
// devices it has look idle between batches. If a key's oldest request has
// already waited longer than W, the recommendation is at least one more
// device than there are (the queue, the leading signal, says so before
// utilisation does).
func (b *Batcher) Signals(now time.Duration) Signals {
	var s Signals
	need := 0.0
	pressure := false
	for _, q := range b.order {
		m := q.model
		bmax := m.batchMax
		w := (m.slo - b.cfg.Latency.Predict(bmax, q.maxLen) - b.cfg.Margin) / 2
		rate := q.sig.rateNow(now, b.cfg.SignalWindow)
		k := KeySignal{Key: q.key, Depth: q.n, Rate: rate}
		if q.n > 0 {
			k.WaitOldest = now - q.oldest()
			k.SlackMin = b.slack(q, now)
			pressure = pressure || k.WaitOldest > max(w, 0)
		}
		if n := min(q.sig.nSizes, len(q.sig.sizes)); n > 0 {
			total := 0
			for _, x := range q.sig.sizes[:n] {
				total += x
			}
			k.BatchSizeMean = float64(total) / float64(n)
		}
		if rate > 0 {
			size := math.Min(float64(bmax), math.Max(1, rate*w.Seconds()))
			k.DevicesNeeded = rate / size * b.cfg.Latency.Predict(int(size), q.maxLen).Seconds()
			need += k.DevicesNeeded
		}
		s.Keys = append(s.Keys, k)
	}
	for _, d := range b.devOrder {
		busy := d.busyTotal
		if d.phase == devBusy {
			busy += now - d.busySince
		}
		frac := 0.0
		if alive := now - d.registered; alive > 0 {
			frac = busy.Seconds() / alive.Seconds()
		}
		s.Devices = append(s.Devices, DeviceSignal{Device: d.addr, BusyFraction: frac, Busy: busy, Running: d.phase == devBusy, Healthy: d.phase != devQuarantined})
	}
	s.DevicesHealthy = b.healthy
	s.WaitPredicted = b.queueWait(now)
	s.Overrun = b.overrun.Learnt()
	s.SuspectsCapped = b.capped
	s.DevicesNeeded = int(math.Ceil(need / b.cfg.TargetUtilization))
	if pressure {
		s.DevicesNeeded = max(s.DevicesNeeded, b.healthy+1)
	}
	return s
}

// Add is the signals of two accumulators of one node together (a split's,
// one per model): their keys; each device once, with the batches both ran
// there (a device's time is shared between the accumulators that use
// it); the devices needed from the keys' needs together (at target
// utilisation, as Batcher.Signals has it), and no fewer than either asks;
// the healthy devices, the predicted wait and the overrun as the larger.
func (s Signals) Add(o Signals, target float64) Signals {
	out := Signals{
		Keys:           append(slices.Clip(s.Keys), o.Keys...),
		Devices:        slices.Clone(s.Devices),
		DevicesHealthy: max(s.DevicesHealthy, o.DevicesHealthy),
		WaitPredicted:  max(s.WaitPredicted, o.WaitPredicted),
		Overrun:        max(s.Overrun, o.Overrun),
		SuspectsCapped: s.SuspectsCapped || o.SuspectsCapped,
	}
	for _, d := range o.Devices {
		i := slices.IndexFunc(out.Devices, func(e DeviceSignal) bool { return e.Device == d.Device })
		if i < 0 {
			out.Devices = append(out.Devices, d)
			continue
		}
		e := &out.Devices[i]
		e.Busy += d.Busy
		e.BusyFraction = min(e.BusyFraction+d.BusyFraction, 1)
		e.Running = e.Running || d.Running
		e.Healthy = e.Healthy || d.Healthy
	}
	need := 0.0
	for _, k := range out.Keys {
		need += k.DevicesNeeded
	}
	if !(target > 0 && target <= 1) {
		target = 1 // BatcherConfig.Validate keeps it in (0, 1]
	}
	out.DevicesNeeded = max(int(math.Ceil(need/target)), s.DevicesNeeded, o.DevicesNeeded)
	return out
}

// queueWait is Signals.WaitPredicted: predictWait's count of the batches
// ahead under the slack policy, for a batch of no key in particular.
func (b *Batcher) queueWait(now time.Duration) time.Duration {
	ahead := 0
	var work time.Duration
	for _, q := range b.order {
		n, w := b.batchesOf(q)
		ahead += n
		work += w
	}
	return b.waitBehind(ahead, work, now)
}
