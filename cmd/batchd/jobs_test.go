package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/batchd/batchd/actors"
)

// helperEnv, when set in a child test process, makes TestJobsServeHelper
// run `batchd serve` with the arguments in it (separated by "\x1f", the unit separator) until it is
// killed: the real command's code path (run, as main calls it), in a
// process of its own that the test can SIGKILL, without a go build.
const helperEnv = "BATCHD_SERVE_HELPER_ARGS"

func TestJobsServeHelper(t *testing.T) {
	args := os.Getenv(helperEnv)
	if args == "" {
		t.Skip("helper process for TestJobsCrashRestart")
	}
	// A test may not os.Exit(0) (testing reports it as a failure): a
	// clean stop returns, and the test binary exits 0 itself.
	if code := run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr); code != exitOK {
		os.Exit(code)
	}
}

// serveChild is a batchd serve child process.
type serveChild struct {
	cmd    *exec.Cmd
	base   string
	stderr *syncBuffer
	// exited is closed once the process is gone; err is then its exit.
	exited chan struct{}
	err    error
}

var servingRE = regexp.MustCompile(`serving on (http://[0-9.:]+)`)

// startServer starts `batchd serve --config cfg` in a child process and
// waits until it serves.
func startServer(t *testing.T, cfg string) *serveChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestJobsServeHelper$")
	cmd.Env = append(os.Environ(), helperEnv+"="+strings.Join([]string{"serve", "--config", cfg, "--log-level", "warn"}, "\x1f"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &serveChild{cmd: cmd, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// However the test ends, the child does not outlive it.
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		select {
		case <-s.exited:
		case <-time.After(30 * time.Second):
		}
	})
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		s.err = cmd.Wait()
		close(s.exited)
	}()
	select {
	case s.base = <-urls:
	case <-s.exited:
		t.Fatalf("server exited at start: %v\n%s", s.err, s.stderr.String())
	case <-time.After(60 * time.Second):
		s.kill(t)
		t.Fatalf("server did not start:\n%s", s.stderr.String())
	}
	return s
}

// kill ends the server with SIGKILL: no clean stop, no flush.
func (s *serveChild) kill(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("server did not die on SIGKILL")
	}
}

// jobStatus is the part of GET /v1/requests/{id} the test reads.
type jobStatus struct {
	ID       string `json:"id"`
	Status   string `json:"status"`
	Progress struct {
		Completed, Failed, Cancelled, Expired, Total int
	} `json:"progress"`
	Items []struct {
		Status   string `json:"status"`
		Output   string `json:"output"`
		Version  string `json:"version"`
		Attempts int    `json:"attempts"`
	} `json:"items"`
	NextOffset *int `json:"next_offset"`
}

func getJSON(t *testing.T, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %d: %v", url, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// TestJobsCrashRestart: a job survives SIGKILLs of the real server at
// random points of its progress; in the end every item is completed once,
// with the output of its own input, in input order, and a resubmission
// with the job's idempotency key finds the same job after each restart.
func TestJobsCrashRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills server processes")
	}
	const (
		items = 3000
		kills = 3
		seed  = 7
	)
	dir := t.TempDir()
	// Slow enough devices and a small window, so the job takes a few
	// seconds and the kills land in the middle of it.
	cfg := filepath.Join(dir, "batchd.yaml")
	yaml := fmt.Sprintf(`http:
  addr: 127.0.0.1:0
devices:
  count: 2
  latency: 40ms
models:
  - name: echo
    versions: [{name: v1}]
jobs:
  dir: %s
  window_job: 40
  window_total: 40
  attempt_max: 10
`, filepath.Join(dir, "data"))
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.WriteString(`{"async": true, "items": [`)
	inputs := make([]string, items)
	for i := range inputs {
		inputs[i] = fmt.Sprintf("crash-%d-%x", i, i*7919)
		if i > 0 {
			body.WriteByte(',')
		}
		fmt.Fprintf(&body, `{"input": %q}`, inputs[i])
	}
	body.WriteString("]}")
	submit := func(s *serveChild) (string, bool) {
		req, _ := http.NewRequest(http.MethodPost, s.base+"/v1/models/echo/batch", bytes.NewReader(body.Bytes()))
		req.Header.Set("Idempotency-Key", "crash-test")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("submit: %v", err)
		}
		defer resp.Body.Close()
		var a struct{ ID string }
		if err := json.NewDecoder(resp.Body).Decode(&a); err != nil || resp.StatusCode != http.StatusAccepted || a.ID == "" {
			t.Fatalf("submit: %d %v %+v", resp.StatusCode, err, a)
		}
		return a.ID, resp.Header.Get("Idempotent-Replayed") == "true"
	}

	rng := rand.New(rand.NewPCG(seed, seed))
	s := startServer(t, cfg)
	id, replayed := submit(s)
	if replayed {
		t.Fatal("first submission reported as a replay")
	}
	for k := range kills {
		// Kill once progress passes a random point of this round's share.
		target := items * (k*4 + 1 + rng.IntN(3)) / (kills*4 + 1)
		deadline := time.Now().Add(60 * time.Second)
		for {
			var st jobStatus
			getJSON(t, s.base+"/v1/requests/"+id+"?limit=0", &st)
			if st.Progress.Completed >= target {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("kill %d: stuck at %+v, want %d", k, st.Progress, target)
			}
			time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
		}
		s.kill(t)
		s = startServer(t, cfg)
		if again, replayed := submit(s); again != id || !replayed {
			t.Fatalf("after restart %d: resubmission gave %s (replayed %v), want %s", k, again, replayed, id)
		}
	}
	var st jobStatus
	deadline := time.Now().Add(120 * time.Second)
	for {
		getJSON(t, s.base+"/v1/requests/"+id+"?limit=0", &st)
		p := st.Progress
		if p.Completed+p.Failed+p.Cancelled+p.Expired == p.Total {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job did not finish: %+v", p)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st.Status != "completed" || st.Progress.Completed != items || st.Progress.Total != items {
		t.Fatalf("job %s: %+v", st.Status, st.Progress)
	}
	retried := checkJobItems(t, s.base, id, inputs, kills+1)
	t.Logf("%d kills; %d items ran more than once (in flight at a kill)", kills, retried)
	// A clean stop after all that.
	if err := s.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.exited:
		if s.err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", s.err, s.stderr.String())
		}
	case <-time.After(60 * time.Second):
		s.kill(t)
		t.Fatal("no exit after SIGTERM")
	}
}

// TestJobsCorruptStore: the real command refuses to start on a damaged
// store file, naming it, and leaves the file alone.
func TestJobsCorruptStore(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(data, "jobs.db")
	garbage := bytes.Repeat([]byte("not a bbolt file "), 2000)
	if err := os.WriteFile(file, garbage, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run([]string{"serve", "--addr", "127.0.0.1:0", "--data-dir", data}, &stdout, &stderr)
	if code == exitOK || !strings.Contains(stderr.String(), file) || !strings.Contains(stderr.String(), "corrupt job store") {
		t.Errorf("exit %d, stderr %q: want a failure naming %s", code, stderr.String(), file)
	}
	if after, _ := os.ReadFile(file); !bytes.Equal(after, garbage) {
		t.Error("the damaged file was changed")
	}
}

// checkJobItems reads a finished job's items back, page by page, and
// fails unless every one of inputs completed once with its own echo
// output, in at most attemptsMax attempts; it returns how many ran more
// than once.
func checkJobItems(t *testing.T, base, id string, inputs []string, attemptsMax int) (retried int) {
	t.Helper()
	seen := 0
	for off := 0; ; {
		var page jobStatus
		getJSON(t, fmt.Sprintf("%s/v1/requests/%s?offset=%d&limit=1000", base, id, off), &page)
		for i, it := range page.Items {
			n := off + i
			if it.Status != "completed" || it.Version != "v1" ||
				!actors.EmulatedOutputMatches(it.Output, "echo", "v1", actors.InputHash(inputs[n])) ||
				it.Attempts < 1 || it.Attempts > attemptsMax {
				t.Fatalf("item %d: %+v (input %q)", n, it, inputs[n])
			}
			if it.Attempts > 1 {
				retried++
			}
		}
		seen += len(page.Items)
		if page.NextOffset == nil {
			break
		}
		off = *page.NextOffset
	}
	if seen != len(inputs) {
		t.Fatalf("%d items read back, want %d", seen, len(inputs))
	}
	return retried
}
