package fidelity

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/batchd/batchd/engine/loadgen"
)

// ErrNoServerTimes is liveFigures' error for a load report without the
// server's own times (the generator's Check was off).
var ErrNoServerTimes = errors.New("the load report has no server times")

// liveFigures reads the comparison's figures from a load report: the 200s'
// latency from their intended send time, their throughput over the
// measured window, and the mean HTTP overhead (client latency minus
// server latency, a mean of differences).
func liveFigures(rep *loadgen.Report) (Figures, float64, error) {
	ok := rep.Latency["ok"]
	if ok.Count == 0 {
		return Figures{}, 0, errors.New("no request of the live run completed")
	}
	f := Figures{
		Completed:     ok.Count,
		P50Ms:         ok.P50,
		P95Ms:         ok.P95,
		P99Ms:         ok.P99,
		ThroughputRPS: rep.Throughput.OKPerS,
		Rejected:      rep.Requests.Rejected,
	}
	if rep.Server == nil || rep.Server.Latency.Count == 0 {
		return f, 0, ErrNoServerTimes
	}
	return f, ok.Mean - rep.Server.Latency.Mean, nil
}

// servingLine is the line `batchd serve` prints once it takes requests.
var servingLine = regexp.MustCompile(`^batchd serving on (http://\S+) `)

// ServingURL returns the base URL in a `batchd serve` ready line, and
// whether line is one.
func ServingURL(line string) (string, bool) {
	m := servingLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// runLive starts `batchd serve` as a child process on a free loopback
// port, sends the open-loop load, and stops the server gracefully.
func runLive(ctx context.Context, c Config, recording string, log io.Writer) (*loadgen.Report, error) {
	// The job store goes next to the recording: the default one is shared
	// with any other batchd on the machine (`make run`), and locked.
	args := append([]string{"serve", "--addr", "127.0.0.1:0", "--record", recording,
		"--data-dir", filepath.Join(filepath.Dir(recording), "jobs"), "--log-level", "warn"}, serveArgs(c)...)
	cmd := exec.Command(c.Server, args...)
	cmd.Stderr = log
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("server stdout: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	// The reader goroutine ends when the server's stdout closes, which
	// stopServer waits for.
	urls, readDone := watchServing(out)
	stopServer := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		waited := make(chan error, 1)
		go func() { <-readDone; waited <- cmd.Wait() }()
		select {
		case err := <-waited:
			if err != nil {
				return fmt.Errorf("server: %w", err)
			}
			return nil
		case <-time.After(serverStopMax):
			_ = cmd.Process.Kill()
			return errors.Join(errors.New("server did not stop in time; killed"), <-waited)
		}
	}

	var base string
	select {
	case u, ok := <-urls:
		if !ok {
			return nil, errors.Join(errors.New("the server exited before serving"), stopServer())
		}
		base = u
	case <-time.After(serverStartMax):
		return nil, errors.Join(errors.New("the server did not start in time"), stopServer())
	case <-ctx.Done():
		return nil, errors.Join(ctx.Err(), stopServer())
	}

	cfg := loadgen.DefaultConfig()
	cfg.URL = base
	cfg.Rate = c.RateRPS
	cfg.Arrival = loadgen.Poisson
	cfg.Duration = c.Duration
	cfg.Warmup = c.Warmup
	cfg.Seed = c.Seed
	cfg.InputLen = c.InputLen
	cfg.Check = true
	rep, err := loadgen.Run(ctx, cfg)
	return rep, errors.Join(err, stopServer())
}

// loadAvg is the 1-minute load average, or NaN where /proc has none.
func loadAvg() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return math.NaN()
	}
	v, err := strconv.ParseFloat(strings.Fields(string(data) + " x")[0], 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// watchServing reads a server's stdout to its end: urls gives the URL of
// its "serving on" line, once, and is closed when stdout ends; readDone is
// closed when stdout has been read to its end.
func watchServing(out io.Reader) (urls <-chan string, readDone <-chan struct{}) {
	u := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		found := false
		for sc.Scan() {
			if url, ok := ServingURL(sc.Text()); ok && !found {
				found = true
				u <- url
			}
		}
		close(u)
	}()
	return u, done
}
