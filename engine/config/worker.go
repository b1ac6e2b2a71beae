package config

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchd/batchd/engine/workerproc"
)

// Worker is the program every device runs its batches in when
// devices.backend is worker: one process per device, speaking batchd's
// worker protocol on its stdin and stdout (engine/workerproc/PROTOCOL.md).
// "{index}" in cmd, dir and env's values becomes the device's index (0,
// 1, ...), so each device can have a GPU of its own:
// env: {CUDA_VISIBLE_DEVICES: "{index}"}.
type Worker struct {
	// Cmd is the program and its arguments: [python3, model.py]. The
	// program is looked up in PATH unless it holds a slash (then it is
	// relative to Dir).
	Cmd []string `yaml:"cmd"`
	// Dir is the worker's working directory; "" is batchd's. A relative
	// one is relative to batchd's working directory.
	Dir string `yaml:"dir"`
	// Env is added to batchd's environment for the worker, which also
	// gets BATCHD_DEVICE_INDEX and BATCHD_DEVICE_NAME.
	Env map[string]string `yaml:"env"`
	// StartTimeout bounds a start, from the spawn to the worker's answer
	// to the handshake: the model's loading included.
	StartTimeout time.Duration `yaml:"start_timeout"`
	// StopTimeout is how long a worker has to exit once its stdin closes
	// (at shutdown) before it is killed.
	StopTimeout time.Duration `yaml:"stop_timeout"`
	// FrameMaxBytes bounds one frame either way (a batch, a result).
	FrameMaxBytes int `yaml:"frame_max_bytes"`
	// StderrLineMax cuts the worker's stderr lines, which batchd logs
	// under the device's name, at this many bytes; StderrLinesPerSecond
	// bounds how many a second are logged.
	StderrLineMax        int `yaml:"stderr_line_max"`
	StderrLinesPerSecond int `yaml:"stderr_lines_per_second"`
}

// BackendWorker is devices.backend's value for worker processes.
const BackendWorker = "worker"

// defaultWorker is the worker section a file starts from: no command, and
// the worker backend's own defaults.
func defaultWorker() Worker {
	w := workerproc.DefaultConfig()
	return Worker{
		Cmd:                  []string{},
		Env:                  map[string]string{},
		StartTimeout:         w.StartTimeout,
		StopTimeout:          w.StopTimeout,
		FrameMaxBytes:        w.FrameMaxBytes,
		StderrLineMax:        w.StderrLineMax,
		StderrLinesPerSecond: w.StderrLinesPerSecond,
	}
}

// checkWorker validates devices.worker: its command with the worker
// backend, and nothing of it without.
func (v *validator) checkWorker() {
	d := v.f.Devices
	w := d.Worker
	const p = "devices.worker"
	if d.Backend != BackendWorker {
		if len(w.Cmd) > 0 {
			v.Bad(p+".cmd", "set, but devices.backend is %q: set devices.backend: worker to run it", d.Backend)
		}
		return
	}
	switch {
	case len(w.Cmd) == 0:
		v.Bad(p+".cmd", "missing: the program each device runs, with its arguments ([python3, model.py])")
	case w.Cmd[0] == "":
		v.Bad(p+".cmd[0]", "empty: the program to run")
	}
	for i, a := range w.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			v.Bad(fmt.Sprintf("%s.cmd[%d]", p, i), "holds a NUL byte")
		}
	}
	if w.Dir != "" && !strings.Contains(w.Dir, "{index}") {
		if st, err := os.Stat(w.Dir); err != nil || !st.IsDir() {
			v.Bad(p+".dir", "%q: not a directory here", w.Dir)
		}
	}
	for _, k := range sortedKeys(w.Env) {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.IndexByte(w.Env[k], 0) >= 0 {
			v.Bad(p+".env."+k, "%q: want a name without '=' and a value without NUL", k)
		}
	}
	v.DurIn(p+".start_timeout", w.StartTimeout, time.Millisecond, time.Hour)
	v.DurIn(p+".stop_timeout", w.StopTimeout, time.Millisecond, shutdownMaxMax)
	// A full batch must fit in a frame: batch_max inputs of the largest
	// size, each with its 4-byte length, and the batch's header.
	need := v.f.Policy.BatchMax*(v.f.HTTP.InputMaxBytes+4) + 1024
	if w.FrameMaxBytes < need || w.FrameMaxBytes > workerproc.FrameMaxBytesMax {
		v.Bad(p+".frame_max_bytes", "%d: want %d (a batch of policy.batch_max inputs of http.input_max_bytes) to %d",
			w.FrameMaxBytes, need, workerproc.FrameMaxBytesMax)
	}
	v.IntIn(p+".stderr_line_max", w.StderrLineMax, 16, 1<<20)
	v.IntIn(p+".stderr_lines_per_second", w.StderrLinesPerSecond, 1, 100_000)
}

// WorkerConfig is device i's worker process (devices.backend worker),
// logging to log; "{index}" is replaced by New.
func (f *File) WorkerConfig(i int, log *slog.Logger) workerproc.Config {
	w := f.Devices.Worker
	c := workerproc.DefaultConfig()
	c.Name = "worker-" + strconv.Itoa(i)
	c.Index = i
	c.Cmd = slices.Clone(w.Cmd)
	c.Dir = w.Dir
	for _, k := range sortedKeys(w.Env) {
		c.Env = append(c.Env, k+"="+w.Env[k])
	}
	c.BatchMax = f.Policy.BatchMax
	c.FrameMaxBytes = w.FrameMaxBytes
	c.StartTimeout, c.StopTimeout = w.StartTimeout, w.StopTimeout
	c.RestartBackoff, c.RestartBackoffMax = f.Devices.RestartBackoff, f.Devices.RestartBackoffMax
	c.RestartsIdleMax = f.Devices.QuarantineAfter
	c.StderrLineMax, c.StderrLinesPerSecond = w.StderrLineMax, w.StderrLinesPerSecond
	c.Log = log
	return c
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
