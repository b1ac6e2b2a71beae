package workerproc

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/engine"
)

// logBuffer is a log destination safe for the workers' goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitMax bounds every wait of these tests: generous, since only a wait
// that never ends is a failure.
const waitMax = 30 * time.Second

// newTestBackend starts a backend on the tests' worker in mode ("" for the
// normal one), changed by edit, and closes it at the test's end.
func newTestBackend(t *testing.T, mode string, edit func(*Config)) (*Backend, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg := DefaultConfig()
	cfg.Cmd = testCmd(t)
	if mode == "" {
		mode = "echo"
	}
	// Under -race the worker, this test binary, would sleep a second at
	// its exit (the race detector's default atexit_sleep_ms).
	cfg.Env = []string{testWorkerEnv + "=" + mode, "GORACE=atexit_sleep_ms=0"}
	cfg.StartTimeout = waitMax
	cfg.StopTimeout = time.Second
	cfg.Log = slog.New(slog.NewTextHandler(logs, nil))
	if edit != nil {
		edit(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b, logs
}

func run(t *testing.T, b *Backend, inputs ...string) ([]string, []error, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	return b.Run(ctx, "m", "v1", inputs)
}

// pid runs the PID probe: the worker process's id.
func pid(t *testing.T, b *Backend) string {
	t.Helper()
	outs, _, err := run(t, b, "PID")
	if err != nil {
		t.Fatalf("PID: %v", err)
	}
	return outs[0]
}

// TestRunEcho: a batch goes to the worker and back, bytes intact, many
// times over the one process.
func TestRunEcho(t *testing.T) {
	b, logs := newTestBackend(t, "", nil)
	if err := b.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	in := binaryInputs()
	for range 3 {
		outs, itemErrs, err := run(t, b, in...)
		if err != nil || itemErrs != nil || len(outs) != len(in) {
			t.Fatalf("%q %v %v", outs, itemErrs, err)
		}
		for i := range in {
			if outs[i] != in[i] {
				t.Errorf("output %d: %q, want %q", i, outs[i], in[i])
			}
		}
	}
	if b.Starts() != 1 || b.Faults() != 0 {
		t.Errorf("%d starts, %d faults; want 1, 0", b.Starts(), b.Faults())
	}
	if !strings.Contains(logs.String(), "worker-0: worker ready") || !strings.Contains(logs.String(), "go test worker") {
		t.Errorf("no start line:\n%s", logs)
	}
	if _, _, err := run(t, b, make([]string, 101)...); !errors.Is(err, engine.ErrBatchSize) {
		t.Errorf("101 inputs: %v, want ErrBatchSize", err)
	}
}

// TestItemError: an item the worker fails fails alone; the batch and the
// device go on.
func TestItemError(t *testing.T) {
	b, _ := newTestBackend(t, "", nil)
	outs, itemErrs, err := run(t, b, "a", "ERR-b", "c")
	if err != nil || len(itemErrs) != 3 || itemErrs[0] != nil || itemErrs[2] != nil || itemErrs[1] == nil ||
		!strings.Contains(itemErrs[1].Error(), "bad item ERR-b") || outs[0] != "a" || outs[2] != "c" {
		t.Fatalf("%q %v %v", outs, itemErrs, err)
	}
	if b.Faults() != 0 {
		t.Errorf("%d faults, want 0", b.Faults())
	}
}

// TestBatchError: a whole-batch error fails the batch, not the device: no
// fault, and the same process serves the next batch.
func TestBatchError(t *testing.T) {
	b, _ := newTestBackend(t, "", nil)
	before := pid(t, b)
	_, _, err := run(t, b, "a", "BATCHERR-x")
	if err == nil || errors.Is(err, engine.ErrDeviceFault) || !strings.Contains(err.Error(), "poison BATCHERR-x") {
		t.Fatalf("%v: want a batch error, no fault", err)
	}
	if after := pid(t, b); after != before || b.Faults() != 0 {
		t.Errorf("pid %s → %s, %d faults: the worker must stay", before, after, b.Faults())
	}
}

// TestFaults: a worker that writes garbage, answers another batch or the
// wrong count, or exits mid-batch, is a device fault (the error wraps
// engine.ErrDeviceFault, which the runtime turns into JobDone.Fault); its
// process is replaced and the next batch runs on the new one.
func TestFaults(t *testing.T) {
	for _, c := range []struct{ input, says string }{
		{"GARBAGE", "frame of"},
		{"WRONGID", "result for batch 3, want 2"},
		{"WRONGCOUNT", "result of 1 items for a batch of 2"},
		{"EXIT", "exit status 3"},
	} {
		t.Run(c.input, func(t *testing.T) {
			b, logs := newTestBackend(t, "", nil)
			before := pid(t, b)
			_, _, err := run(t, b, "a", c.input)
			if !errors.Is(err, engine.ErrDeviceFault) || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("%v: want a device fault saying %q", err, c.says)
			}
			if c.input == "EXIT" && !strings.Contains(err.Error(), "exiting mid-batch (as asked)") {
				t.Errorf("%v: want the worker's last stderr", err)
			}
			after := pid(t, b)
			if after == before || b.Starts() != 2 || b.Faults() != 1 {
				t.Errorf("pid %s → %s, %d starts, %d faults: want a new process", before, after, b.Starts(), b.Faults())
			}
			if !strings.Contains(logs.String(), "worker-0: worker fault; restarting it") {
				t.Errorf("no fault line:\n%s", logs)
			}
		})
	}
}

// TestHang: a worker that does not answer is abandoned when the batch's
// context ends (the engine's bound on every call; the device actor's
// watchdog has given up on it by then): a fault, the process killed, and
// the next batch served by a new one.
func TestHang(t *testing.T) {
	b, _ := newTestBackend(t, "", nil)
	before := pid(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, _, err := b.Run(ctx, "m", "v1", []string{"HANG"})
	if !errors.Is(err, engine.ErrDeviceFault) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v: want a fault, past the deadline", err)
	}
	n, _ := strconv.Atoi(before)
	if err := syscall.Kill(n, 0); err == nil {
		// Reaped by now? The kill is synchronous, the reaping not: wait.
		for end := time.Now().Add(waitMax); syscall.Kill(n, 0) == nil; time.Sleep(time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("the hung worker %d still runs", n)
			}
		}
	}
	if after := pid(t, b); after == before {
		t.Errorf("the same process %s after a hang", after)
	}
}

// TestStderrToLog: the worker's stderr reaches the log line by line, each
// prefixed with the device's name; a long line is cut at StderrLineMax.
func TestStderrToLog(t *testing.T) {
	b, logs := newTestBackend(t, "", func(c *Config) { c.Index = 3; c.StderrLineMax = 64 })
	long := strings.Repeat("x", 200)
	if _, _, err := run(t, b, "STDERR:hello from the model", "STDERR:"+long); err != nil {
		t.Fatal(err)
	}
	b.Close() // the stderr is read to its end
	out := logs.String()
	if !strings.Contains(out, `msg="worker-3: hello from the model" device=worker-3`) {
		t.Errorf("no prefixed stderr line:\n%s", out)
	}
	if strings.Contains(out, long) || !strings.Contains(out, "bytes more)") {
		t.Errorf("the long line is not cut:\n%s", out)
	}
}

// TestStartFailure: a worker that exits before its handshake fails Start
// with its exit status and last stderr lines; one that answers the
// handshake wrongly fails it too.
func TestStartFailure(t *testing.T) {
	b, _ := newTestBackend(t, "fail-start", nil)
	err := b.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot load the model (as asked)") {
		t.Errorf("start: %v, want the worker's stderr", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitMax)
	defer cancel()
	if _, _, err := b.Run(ctx, "m", "v1", []string{"a"}); !errors.Is(err, engine.ErrDeviceFault) {
		t.Errorf("run on a worker that cannot start: %v, want a fault", err)
	}
	b, _ = newTestBackend(t, "no-magic", nil)
	if err := b.Start(context.Background()); !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), "magic") {
		t.Errorf("start: %v, want a protocol error about the magic", err)
	}
	b, _ = newTestBackend(t, "prints", nil)
	if err := b.Start(context.Background()); !errors.Is(err, errProtocol) || !strings.Contains(err.Error(), `"load": is the worker printing to its stdout`) {
		t.Errorf("start: %v, want a protocol error naming the print", err)
	}
	b, _ = newTestBackend(t, "", func(c *Config) { c.Cmd = []string{filepath.Join(t.TempDir(), "missing")} })
	if err := b.Start(context.Background()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("start: %v, want a missing program", err)
	}
}

// TestIdleDeath: a worker killed between batches is replaced before the
// next batch needs it, and that batch runs.
func TestIdleDeath(t *testing.T) {
	b, logs := newTestBackend(t, "", nil)
	before := pid(t, b)
	n, _ := strconv.Atoi(before)
	if err := syscall.Kill(n, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(waitMax); b.Starts() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no restart of the killed worker:\n%s", logs)
		}
	}
	if after := pid(t, b); after == before {
		t.Errorf("the same process %s after a kill", after)
	}
	if !strings.Contains(logs.String(), "exited while idle") {
		t.Errorf("no line about the death:\n%s", logs)
	}
}

// TestRestartBackoff: failures in a row space the starts out, doubling,
// and the restarts nobody asks for stop at RestartsIdleMax.
func TestRestartBackoff(t *testing.T) {
	b, _ := newTestBackend(t, "fail-start", func(c *Config) {
		c.RestartBackoff = 50 * time.Millisecond
		c.RestartBackoffMax = 200 * time.Millisecond
	})
	var waits []time.Duration
	for range 5 {
		t0 := time.Now()
		if err := b.Start(context.Background()); err == nil {
			t.Fatal("a failing worker started")
		}
		waits = append(waits, time.Since(t0))
	}
	// Failures 0 and 1 start at once; then 50, 100, 200 ms (the max).
	for i, least := range []time.Duration{0, 0, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		if waits[i] < least {
			t.Errorf("start %d after %v, want at least %v (all: %v)", i, waits[i], least, waits)
		}
	}
}
