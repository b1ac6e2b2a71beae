package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/upstream"
	"github.com/batchd/batchd/engine/workerproc"
)

// modelBackend is what both bytenet backends (cudabridge.CPU and
// cudabridge.Device) offer the engine.
type modelBackend interface {
	Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error)
}

// engineBackend adapts a bytenet backend to engine.Backend: cudabridge
// does not import the engine, so its device faults and batch-size errors
// are mapped onto the engine's here.
type engineBackend struct{ b modelBackend }

func (a engineBackend) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	outs, itemErrs, err := a.b.Run(ctx, model, version, inputs)
	switch {
	case err == nil:
	case errors.Is(err, cudabridge.ErrDeviceFault):
		err = fmt.Errorf("%w: %w", engine.ErrDeviceFault, err)
	case errors.Is(err, cudabridge.ErrBatchSize):
		err = fmt.Errorf("%w: %w", engine.ErrBatchSize, err)
	}
	return outs, itemErrs, err
}

// engineConfig returns the engine's configuration for f with the backend
// f.Devices.Backend names, the function that releases the backends once
// the engine has stopped, and the backends' own series for /metrics (the
// GPUs', for cuda; none otherwise). For cpu and cuda it first makes f serve the
// bytenet model (registering it when the file lists no model of that
// name) and, for cuda, one device per visible GPU.
func engineConfig(f *config.File, log *slog.Logger) (engine.Config, func(), []prometheus.Collector, error) {
	noop := func() {}
	kind := f.Devices.Backend
	if kind == config.BackendEmulated || kind == "" {
		c, err := f.EngineConfig(engine.LinkedRuntime)
		return c, noop, nil, err
	}
	switch kind {
	case config.BackendWorker:
		c, closeAll, err := workerConfig(f, log)
		return c, closeAll, nil, err
	case config.BackendUpstream:
		c, closeAll, err := upstreamConfig(f, log)
		return c, closeAll, nil, err
	case config.BackendFanout:
		c, closeAll, err := fanoutConfig(f, log)
		return c, closeAll, nil, err
	}
	lim, err := bytenetModel(f)
	if err != nil {
		return engine.Config{}, noop, nil, err
	}
	var backends []modelBackend
	var collectors []prometheus.Collector
	closeAll := noop
	switch kind {
	case config.BackendCPU:
		for range f.Devices.Count {
			c, err := cudabridge.NewCPU(lim)
			if err != nil {
				return engine.Config{}, noop, nil, err
			}
			backends = append(backends, c)
		}
	case config.BackendCUDA:
		devs, err := openGPUs(lim, f.Devices.CUDAGraphs, f.Devices.CUDAWaitSleep)
		if err != nil {
			return engine.Config{}, noop, nil, fmt.Errorf("devices.backend cuda: %w", err)
		}
		if f.Devices.Count != len(devs) {
			log.Info("devices.backend cuda: one device per GPU", "gpus", len(devs), "devices.count was", f.Devices.Count)
		}
		f.Devices.Count = len(devs)
		if f.Devices.CUDAWaitSleep && os.Getenv("GOMAXPROCS") == "" {
			// Each device's sleeping wait holds a processor: one more
			// each, for the core it leaves free (once a process).
			waitSleepProcs.Do(func() {
				was := runtime.GOMAXPROCS(runtime.GOMAXPROCS(0) + len(devs))
				log.Info("devices.cuda_wait_sleep: one more processor a GPU", "gomaxprocs", was+len(devs), "was", was)
			})
		}
		closeAll = func() {
			for _, d := range devs {
				if err := d.Close(); err != nil {
					log.Warn("closing GPU", "device", d.Ordinal(), "err", err)
				}
			}
		}
		for _, d := range devs {
			backends = append(backends, d)
		}
		collectors = gpuCollectors(devs)
	default:
		return engine.Config{}, noop, nil, fmt.Errorf("devices.backend %q: want emulated, cpu, cuda, worker, upstream or fanout", kind)
	}
	if err := f.Validate(); err != nil {
		closeAll()
		return engine.Config{}, noop, nil, err
	}
	c, err := f.EngineConfig(engine.LinkedRuntime)
	if err != nil {
		closeAll()
		return engine.Config{}, noop, nil, err
	}
	c.Backend = func(i int) engine.Backend { return engineBackend{backends[i]} }
	return c, closeAll, collectors, nil
}

// workerConfig is engineConfig for devices.backend worker: one worker
// process per device (engine/workerproc), every one started, and its
// handshake done, before the engine starts, so that a worker that cannot
// start stops the server's start with its own last words (its stderr).
func workerConfig(f *config.File, log *slog.Logger) (engine.Config, func(), error) {
	noop := func() {}
	c, err := f.EngineConfig(engine.LinkedRuntime)
	if err != nil {
		return engine.Config{}, noop, err
	}
	backends := make([]*workerproc.Backend, f.Devices.Count)
	closeAll := func() {
		var wg sync.WaitGroup
		for _, b := range backends {
			if b != nil {
				wg.Go(func() { _ = b.Close() })
			}
		}
		wg.Wait()
	}
	for i := range backends {
		b, err := workerproc.New(f.WorkerConfig(i, log))
		if err != nil {
			closeAll()
			return engine.Config{}, noop, fmt.Errorf("devices.worker: %w", err)
		}
		backends[i] = b
	}
	// In parallel: a model's loading can take seconds per worker. Each
	// start is bounded by devices.worker.start_timeout.
	errs := make([]error, len(backends))
	var wg sync.WaitGroup
	for i, b := range backends {
		wg.Go(func() { errs[i] = b.Start(context.Background()) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeAll()
		return engine.Config{}, noop, fmt.Errorf("devices.worker: %w", err)
	}
	c.Backend = func(i int) engine.Backend { return backends[i] }
	return c, closeAll, nil
}

// upstreamConfig is engineConfig for devices.backend upstream: the
// devices are slots on one Open Inference Protocol server, sharing its
// connection pool. The server must answer its /v2/health/ready within
// devices.upstream.ready_timeout, or the start stops, saying what it saw:
// an upstream that cannot be reached at start is far more often a wrong
// address, port, token or CA than a blip, and a node that served anyway
// would take traffic only to fail it (every batch a fault, every device
// quarantined). Once serving, an upstream that goes away is the device
// actor's business: faults, re-queues, backoff, quarantine, readiness.
func upstreamConfig(f *config.File, log *slog.Logger) (engine.Config, func(), error) {
	noop := func() {}
	c, err := f.EngineConfig(engine.LinkedRuntime)
	if err != nil {
		return engine.Config{}, noop, err
	}
	u, err := upstream.NewOIP(f.UpstreamConfig())
	if err != nil {
		return engine.Config{}, noop, fmt.Errorf("devices.upstream: %w", err)
	}
	if err := u.Ready(context.Background()); err != nil {
		u.Close()
		return engine.Config{}, noop, fmt.Errorf("devices.upstream: %w", err)
	}
	log.Info("upstream ready", "url", f.Devices.Upstream.URL, "slots", f.Devices.Count)
	slots := make([]*upstream.Slot, f.Devices.Count)
	for i := range slots {
		slots[i] = u.Slot(i)
	}
	c.Backend = func(i int) engine.Backend { return slots[i] }
	return c, u.Close, nil
}

// fanoutConfig is engineConfig for devices.backend fanout: every device
// sends its batches, one call per input, to one single-input API, under
// the concurrency limit they share. There is no standard readiness
// endpoint to ask, so nothing is asked at start.
func fanoutConfig(f *config.File, _ *slog.Logger) (engine.Config, func(), error) {
	noop := func() {}
	c, err := f.EngineConfig(engine.LinkedRuntime)
	if err != nil {
		return engine.Config{}, noop, err
	}
	u, err := upstream.NewFanout(f.FanoutConfig())
	if err != nil {
		return engine.Config{}, noop, fmt.Errorf("devices.fanout: %w", err)
	}
	devs := make([]*upstream.FanoutDevice, f.Devices.Count)
	for i := range devs {
		devs[i] = u.Device(i)
	}
	c.Backend = func(i int) engine.Backend { return devs[i] }
	return c, u.Close, nil
}

// bytenetModel makes f's registry serve bytenet: it adds the model, with
// the backends' input limit, when f lists none of that name; and it returns
// the limits the backends' buffers are sized for.
func bytenetModel(f *config.File) (cudabridge.Limits, error) {
	at := -1
	for i, m := range f.Models {
		if m.Name == cudabridge.ModelName {
			at = i
		}
	}
	if at < 0 {
		f.Models = []config.Model{{
			Name:        cudabridge.ModelName,
			Versions:    []config.Version{{Name: cudabridge.ModelVersion, Weight: 1}},
			InputLenMax: min(cudabridge.InputLenMax, f.HTTP.InputMaxBytes),
		}}
		at = 0
	}
	m := f.Models[at]
	lim := cudabridge.Limits{BatchMax: f.Policy.BatchMax, InputLenMax: cudabridge.InputLenMax}
	if m.BatchMax > 0 {
		lim.BatchMax = min(lim.BatchMax, m.BatchMax)
	}
	if lim.BatchMax > cudabridge.BatchMax {
		return cudabridge.Limits{}, fmt.Errorf("policy.batch_max %d: the %s backends take at most %d (set models[%d].batch_max)",
			lim.BatchMax, cudabridge.ModelName, cudabridge.BatchMax, at)
	}
	if m.InputLenMax == 0 || m.InputLenMax > cudabridge.InputLenMax {
		return cudabridge.Limits{}, fmt.Errorf("models[%d].input_len_max %d: the %s backends take inputs of 1 to %d bytes; set it",
			at, m.InputLenMax, cudabridge.ModelName, cudabridge.InputLenMax)
	}
	lim.InputLenMax = m.InputLenMax
	return lim, nil
}

// waitSleepProcs raises GOMAXPROCS for devices.cuda_wait_sleep once a
// process, however many servers it builds.
var waitSleepProcs sync.Once

// openGPUs opens every visible GPU, or none; graphs runs their batches
// as CUDA graphs, and waitSleep has their waits sleep first
// (cudabridge.DeviceConfig.WaitSleep).
func openGPUs(lim cudabridge.Limits, graphs, waitSleep bool) ([]*cudabridge.Device, error) {
	n, err := cudabridge.DeviceCount()
	if err != nil {
		return nil, err
	}
	var devs []*cudabridge.Device
	for i := range n {
		cfg := cudabridge.DefaultDeviceConfig(i)
		cfg.Limits = lim
		cfg.Graphs, cfg.WaitSleep = graphs, waitSleep
		d, err := cudabridge.OpenDevice(cfg)
		if err != nil {
			for _, o := range devs {
				err = errors.Join(err, o.Close())
			}
			return nil, err
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// gpuCollectors are the GPUs' series for /metrics: the batches each ran,
// and the time in them, whole (the backend's Run) and waiting for the GPU
// to finish the work queued. Their rates against the wall clock split a
// saturated device's cycle: the GPU's share, the host's work around it
// (padding, launches, decoding, formatting), and the engine's hand-over
// between two batches (the rest).
func gpuCollectors(devs []*cudabridge.Device) []prometheus.Collector {
	batches := prometheus.NewDesc("batchd_gpu_batches_total", "Batches the GPU ran (cuda backend).", []string{"gpu"}, nil)
	run := prometheus.NewDesc("batchd_gpu_run_seconds_total", "Time in the GPU backend's batches, from the call to the formatted outputs (cuda backend).", []string{"gpu"}, nil)
	wait := prometheus.NewDesc("batchd_gpu_wait_seconds_total", "Time the GPU backend's batches waited for the GPU once their work was queued (cuda backend).", []string{"gpu"}, nil)
	graphs := prometheus.NewDesc("batchd_gpu_graph_launches_total", "Batches whose kernels ran as one CUDA graph launch (cuda backend); the others launched each kernel.", []string{"gpu"}, nil)
	return []prometheus.Collector{collectorFunc{descs: []*prometheus.Desc{batches, run, wait, graphs}, collect: func(ch chan<- prometheus.Metric) {
		for _, d := range devs {
			c, gpu := d.Counters(), strconv.Itoa(d.Ordinal())
			ch <- prometheus.MustNewConstMetric(batches, prometheus.CounterValue, float64(c.Batches), gpu)
			ch <- prometheus.MustNewConstMetric(run, prometheus.CounterValue, c.Run.Seconds(), gpu)
			ch <- prometheus.MustNewConstMetric(wait, prometheus.CounterValue, c.Wait.Seconds(), gpu)
			ch <- prometheus.MustNewConstMetric(graphs, prometheus.CounterValue, float64(c.GraphLaunches), gpu)
		}
	}}}
}
