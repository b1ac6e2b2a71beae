package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// debianPython is the interpreter the worker examples run on: Debian's,
// where apt's python3-torch installs PyTorch (the first python3 on PATH
// may be another).
const debianPython = "/usr/bin/python3"

// workerPythonDir is engine/workerproc/python, absolute.
func workerPythonDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "engine", "workerproc", "python"))
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(debianPython); err != nil {
		t.Skipf("%s is missing (%v): the worker-process end-to-end tests need Debian's python3", debianPython, err)
	}
}

// inferFull posts input to model and returns the status, the output and
// the error's code and message.
func inferFull(t *testing.T, base, model, input string) (status int, output, code, msg string, batch int) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"input": input})
	resp, err := http.Post(base+"/v1/models/"+model+"/infer", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Errorf("infer %q: %v", input, err)
		return 0, "", "", "", 0
	}
	defer resp.Body.Close()
	var r struct {
		Output    string `json:"output"`
		BatchSize int    `json:"batch_size"`
		Error     *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &r); err != nil {
		t.Errorf("infer %q: %v: %s", input, err, data)
	}
	if r.Error != nil {
		code, msg = r.Error.Code, r.Error.Message
	}
	return resp.StatusCode, r.Output, code, msg, r.BatchSize
}

// stdlibModel is a model in plain Python: upper-cases its inputs, fails
// an input that starts with "bad" alone (an Exception element) and a batch
// that holds "boom" whole (an exception raised by batch); it prints on
// stdout and stderr, which must both reach batchd's log.
const stdlibModel = `import sys
print("loading the model on stdout")
print("loading the model on stderr", file=sys.stderr)

def batch(inputs):
    print("batch of %d" % len(inputs), file=sys.stderr)
    if b"boom" in inputs:
        raise RuntimeError("the whole batch fails")
    return [ValueError("cannot take " + x.decode()) if x.startswith(b"bad") else x.upper() for x in inputs]
`

// TestServeWorkerPython: batchd serve with devices.backend worker runs a
// plain-Python model through batchd_worker.py, one process per device:
// outputs come back, an item's Exception fails that item alone, a batch's
// exception fails that batch (the worker stays: no fault), the worker's
// prints reach the log under the device's name, and concurrent requests
// share batches.
func TestServeWorkerPython(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte(stdlibModel), 0o600); err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(workerPythonDir(t), "batchd_worker.py")
	cfg := fmt.Sprintf(`devices:
  backend: worker
  count: 2
  latency: 20ms
  worker:
    cmd: [%q, %q, model.py]
    dir: %q
    env: {MODEL_DEVICE: "cpu-{index}"}
models:
  - name: upper
    versions: [{name: v1, weight: 1}]
policy:
  slo: 5s
`, debianPython, helper, dir)
	logs := &syncBuffer{}
	var stdout bytes.Buffer
	base, stop := startServeLog(t, cfg, &stdout, logs)
	if !strings.Contains(stdout.String(), "2 worker devices") {
		t.Errorf("startup line:\n%s", stdout.String())
	}
	if st, out, _, _, _ := inferFull(t, base, "upper", "hello"); st != http.StatusOK || out != "HELLO" {
		t.Errorf("hello: %d %q, want 200 HELLO", st, out)
	}

	// A crowd, with one bad item among it: only that one fails.
	const n = 40
	var wg sync.WaitGroup
	status := make([]int, n)
	outs, msgs := make([]string, n), make([]string, n)
	sizes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			in := fmt.Sprintf("item-%d", i)
			if i == 7 {
				in = "bad-7"
			}
			status[i], outs[i], _, msgs[i], sizes[i] = inferFull(t, base, "upper", in)
		})
	}
	wg.Wait()
	batched := false
	for i := range n {
		switch {
		case i == 7:
			if status[i] != http.StatusInternalServerError || !strings.Contains(msgs[i], "ValueError: cannot take bad-7") {
				t.Errorf("bad-7: %d %q, want 500 and the ValueError", status[i], msgs[i])
			}
		case status[i] != http.StatusOK || outs[i] != strings.ToUpper(fmt.Sprintf("item-%d", i)):
			t.Errorf("item-%d: %d %q", i, status[i], outs[i])
		}
		batched = batched || sizes[i] > 1
	}
	if !batched {
		t.Errorf("40 concurrent requests never shared a batch: %v", sizes)
	}

	// A batch's exception: that request fails, and the workers stay.
	if st, _, _, msg, _ := inferFull(t, base, "upper", "boom"); st != http.StatusInternalServerError || !strings.Contains(msg, "RuntimeError: the whole batch fails") {
		t.Errorf("boom: %d %q, want 500 and the RuntimeError", st, msg)
	}
	if st, out, _, _, _ := inferFull(t, base, "upper", "after"); st != http.StatusOK || out != "AFTER" {
		t.Errorf("after the batch error: %d %q", st, out)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	log := logs.String()
	for _, want := range []string{"worker-0: loading the model on stdout", "worker-1: loading the model on stderr",
		"worker-0: worker ready", "batch of ", "Traceback"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "worker fault") {
		t.Errorf("a fault without a crash:\n%s", log)
	}
}

// TestServeWorkerStartFails: a worker that cannot load its model stops
// the server's start, and the error quotes the worker's stderr.
func TestServeWorkerStartFails(t *testing.T) {
	needPython(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "model.py"), []byte("raise ImportError('no weights here')\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := writeFile(t, fmt.Sprintf("devices:\n  backend: worker\n  count: 1\n  worker:\n    cmd: [%q, %q, model.py]\n    dir: %q\n",
		debianPython, filepath.Join(workerPythonDir(t), "batchd_worker.py"), dir))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"serve", "--config", p, "--addr", "127.0.0.1:0"}, &stdout, &stderr); code == exitOK ||
		!strings.Contains(stderr.String(), "ImportError: no weights here") {
		t.Errorf("exit %d, stderr:\n%s\nwant a failure quoting the worker's ImportError", code, stderr.String())
	}
}

// torchScript installs Debian's python3-torch where it can (the Makefile's
// test target runs it too).
const torchScript = "install-torch.sh"

// needTorch skips unless Debian's python3 imports torch.
func needTorch(t *testing.T) {
	t.Helper()
	needPython(t)
	out, err := exec.Command(debianPython, "-c", "import torch").CombinedOutput()
	if err != nil {
		t.Skipf("%s cannot import torch (%v: %s): run engine/workerproc/python/%s (apt-get install python3-torch) to run the PyTorch example",
			debianPython, err, bytes.TrimSpace(out), torchScript)
	}
}

// TestServeWorkerTorch: the worked example, a seeded PyTorch MLP, served
// by batchd: each answer is the model's own output for that input (the
// class exactly, the scores to 1e-3), whatever batch it shared.
func TestServeWorkerTorch(t *testing.T) {
	needTorch(t)
	dir := workerPythonDir(t)
	cfg := fmt.Sprintf(`devices:
  backend: worker
  count: 2
  latency: 20ms
  worker:
    cmd: [%q, example_torch.py]
    dir: %q
models:
  - name: mlp
    versions: [{name: v1, weight: 1}]
policy:
  slo: 10s
`, debianPython, dir)
	inputs := []string{"hello", "world", "batchd", "a longer input of more than sixty-four bytes, which the model cuts there", "x", "0123456789"}
	ref, err := exec.Command(debianPython, append([]string{filepath.Join(dir, "example_torch.py"), "--reference"}, inputs...)...).Output()
	if err != nil {
		t.Fatalf("the reference: %v", err)
	}
	want := strings.Split(strings.TrimSpace(string(ref)), "\n")
	if len(want) != len(inputs) {
		t.Fatalf("reference: %d lines for %d inputs:\n%s", len(want), len(inputs), ref)
	}
	var stdout bytes.Buffer
	logs := &syncBuffer{}
	base, stop := startServeLog(t, cfg, &stdout, logs)
	const rounds = 5
	var wg sync.WaitGroup
	got := make([]string, rounds*len(inputs))
	status := make([]int, len(got))
	for i := range got {
		wg.Go(func() { status[i], got[i], _, _, _ = inferFull(t, base, "mlp", inputs[i%len(inputs)]) })
	}
	wg.Wait()
	for i := range got {
		if status[i] != http.StatusOK || !sameMLP(t, got[i], want[i%len(inputs)]) {
			t.Errorf("%q: %d %s, want %s", inputs[i%len(inputs)], status[i], got[i], want[i%len(inputs)])
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "example_torch: torch") {
		t.Errorf("no worker info in the log:\n%s", logs.String())
	}
}

// sameMLP compares two outputs of example_torch.py: the same class, and
// scores within 1e-3 (a batch may sum in another order).
func sameMLP(t *testing.T, a, b string) bool {
	t.Helper()
	type out struct {
		Class  int       `json:"class"`
		Scores []float64 `json:"scores"`
	}
	var x, y out
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil || len(x.Scores) != 8 || len(y.Scores) != 8 {
		return false
	}
	for i := range x.Scores {
		if math.Abs(x.Scores[i]-y.Scores[i]) > 1e-3 {
			return false
		}
	}
	return x.Class == y.Class
}
