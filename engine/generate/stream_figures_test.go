package generate

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/engine/openai"
	"github.com/batchd/batchd/engine/rawtcp"
)

// stampStep is the emulated generator as a NewStep backend that stamps
// each step's end: it takes the cost model's time for the step, then
// records, for every slot that sampled a token, when the step ended, by
// sequence in order (the k-th stamp of a sequence is its k-th token's
// step end: no preemption or crash in the run that uses it). It also
// learns each sequence's prompt from its prefill chunks.
type stampStep struct {
	emu  *gen.Emulated
	cost gen.Cost
	mu   *sync.Mutex
	ends map[uint64][]time.Time
	seqs map[string]uint64
	// prompt gathers a sequence's prompt chunks until it is whole.
	prompt map[uint64]string
}

func (s stampStep) Step(job gen.StepJob) gen.StepDone {
	t0 := time.Now()
	done := s.emu.Step(job)
	time.Sleep(time.Until(t0.Add(s.cost.StepCost(job))))
	end := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sl := range job.Slots {
		if sl.Start == 0 {
			s.prompt[sl.Seq] = ""
		}
		if p, ok := s.prompt[sl.Seq]; ok {
			p += sl.Input
			s.prompt[sl.Seq] = p
			if len(p) >= sl.PromptLen {
				s.seqs[p[:sl.PromptLen]] = sl.Seq
				delete(s.prompt, sl.Seq)
			}
		}
		if sl.Sample {
			s.ends[sl.Seq] = append(s.ends[sl.Seq], end)
		}
	}
	return done
}

func (s stampStep) Reset() { s.emu.Reset() }

// TestStreamLatencyFigures measures what the server adds between a
// step's end and its tokens reaching the clients' streams, at
// BATCHD_GEN_STREAM_CLIENTS concurrent streaming clients (e.g. 256) on
// loopback: each client POSTs /v1/completions with stream true through
// engine/openai's handler over a real HTTP server, and stamps each SSE
// chunk as it reads it; the device backend stamps each step's end. The
// gap, per token, is the worker's StepDone through the scheduler actor,
// the token's listener, the request's stream, the handler's write and
// flush, the loopback and the client's read. It prints p50/p95/p99/max.
// For the figures: it skips unless the variable is set.
//
//	BATCHD_GEN_STREAM_CLIENTS=256 go test -count=1 -run TestStreamLatencyFigures -v ./engine/generate/
func TestStreamLatencyFigures(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("BATCHD_GEN_STREAM_CLIENTS"))
	if n < 1 {
		t.Skip("set BATCHD_GEN_STREAM_CLIENTS (e.g. 256) to time the step-end-to-client gap")
	}
	const tokens = 128
	g := gen.DefaultConfig("", "v1", 1)
	g.SeqsMax, g.StepTokensMax = n, max(512, n)
	g.BlocksPerDevice = n*(tokens+32)/g.BlockTokens + 64
	g.WaitingMax = 2 * n
	out := gen.Lognormal{Median: tokens, Max: tokens}
	var mu sync.Mutex
	st := stampStep{cost: g.Cost, mu: &mu, ends: map[uint64][]time.Time{}, seqs: map[string]uint64{}, prompt: map[uint64]string{}}
	cfg := Config{Models: []string{"llm"}, Gen: g, OutLen: out, InFlightMax: 2 * n,
		NewStep: func(string, int) (Step, error) {
			st.emu = gen.NewEmulated(out, g.BlockTokens)
			return st, nil
		}}
	s := newService(t, cfg)
	// The server's side: each response's flushes, stamped as they return
	// (a completion stream flushes once per token, then its end).
	flushes := make([][]time.Time, n)
	h := openai.New(s, openai.Config{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i, err := strconv.Atoi(r.Header.Get("X-Client"))
		if err != nil || i < 0 || i >= n {
			http.Error(w, "X-Client", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(&stampFlush{ResponseWriter: w, at: &flushes[i]}, r)
	}))
	// Raw connections, as batchd serve's listener gives (engine/rawtcp).
	srv.Listener = rawtcp.Listener{Listener: srv.Listener}
	srv.Start()
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: n, MaxConnsPerHost: n}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	recv := make([][]time.Time, n)
	prompts := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		prompts[i] = fmt.Sprintf("client %04d says", i)
		wg.Go(func() {
			body, _ := json.Marshal(map[string]any{"model": "llm", "prompt": prompts[i], "max_tokens": tokens, "stream": true})
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/completions", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Client", strconv.Itoa(i))
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				line, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || line == "[DONE]" {
					continue
				}
				at := time.Now()
				var c struct {
					Choices []struct{ Text string } `json:"choices"`
				}
				if err := json.Unmarshal([]byte(line), &c); err != nil {
					errs <- err
					return
				}
				for _, ch := range c.Choices {
					for range len(ch.Text) {
						recv[i] = append(recv[i], at)
					}
				}
			}
			if resp.StatusCode != http.StatusOK {
				errs <- fmt.Errorf("client %d: status %d", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var gaps, served []time.Duration
	for i, p := range prompts {
		seq, ok := st.seqs[p]
		ends := st.ends[seq]
		if !ok || len(ends) != len(recv[i]) || len(recv[i]) != tokens || len(flushes[i]) < tokens {
			t.Fatalf("client %d: %d tokens received, %d flushed, %d steps stamped, want %d", i, len(recv[i]), len(flushes[i]), len(ends), tokens)
		}
		for k, at := range recv[i] {
			gaps = append(gaps, at.Sub(ends[k]))
			served = append(served, flushes[i][k].Sub(ends[k]))
		}
	}
	t.Logf("%d streams of %d tokens, 1 device, steps of the cost model's time; µs from the step's end:\n  to the token's SSE write flushed: %s\n  to the client's read of it: %s",
		n, tokens, usPcts(served), usPcts(gaps))
}

func usPcts(d []time.Duration) string {
	return fmt.Sprintf("p50 %.0f / p95 %.0f / p99 %.0f / max %.0f (%d tokens)",
		float64(pctAt(d, 0.5))/1e3, float64(pctAt(d, 0.95))/1e3, float64(pctAt(d, 0.99))/1e3, float64(pctAt(d, 1))/1e3, len(d))
}

// stampFlush stamps each flush of a response as it returns.
type stampFlush struct {
	http.ResponseWriter
	at *[]time.Time
}

func (f *stampFlush) Flush() {
	http.NewResponseController(f.ResponseWriter).Flush()
	*f.at = append(*f.at, time.Now())
}
