package generate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/engine/openai"
)

// TestMain: Close leaves no goroutine of the runtime or the workers.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testOutLen: outputs of median 12 tokens, at most 40.
var testOutLen = gen.Lognormal{Median: 12, Sigma: 0.8, Max: 40}

// testConfig is a small, fast group: 2 devices of 64 blocks of 4 tokens,
// steps of 1 ms plus 10 µs a token.
func testConfig() Config {
	g := gen.DefaultConfig("", "v1", 2)
	g.BlockTokens, g.BlocksPerDevice, g.AdmitHeadroomBlocks = 4, 64, 2
	g.StepTokensMax, g.SeqsMax = 64, 8
	g.WaitingMax, g.PromptMax, g.TokensMax = 64, 200, 100
	g.TTFT, g.Timeout = 5*time.Second, 20*time.Second
	g.Cost = gen.Cost{Base: time.Millisecond, PerToken: 10 * time.Microsecond}
	return Config{Models: []string{"tiny", "small"}, Gen: g, OutLen: testOutLen}
}

func newService(t *testing.T, cfg Config) *Service {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return s
}

// generate runs one request and returns its text, as the handler would
// collect it.
func generate(ctx context.Context, s *Service, req openai.Request) (string, openai.Result, error) {
	var b strings.Builder
	res, err := s.Generate(ctx, req, func(text string) error {
		b.WriteString(text)
		return nil
	})
	return b.String(), res, err
}

// waitIdle polls model's published state until nothing is in flight and
// no KV block is held, for at most bound.
func waitIdle(t *testing.T, s *Service, model string, bound time.Duration) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		st := s.Stats(model)
		if st.InFlight == 0 && st.BlocksUsed == 0 && st.Running == 0 && st.Waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not idle after %v: %+v", model, bound, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestGenerateIsEmulatedOutput: 40 concurrent requests over two models
// stream exactly gen.EmulatedOutput's text for their prompt, model and
// version, with finish "length" where max_tokens cut the output and
// "stop" where the model ended it; afterwards every KV block is free.
func TestGenerateIsEmulatedOutput(t *testing.T) {
	s := newService(t, testConfig())
	var wg sync.WaitGroup
	lengths := map[openai.Finish]int{}
	var mu sync.Mutex
	for i := range 40 {
		wg.Go(func() {
			model := []string{"tiny", "small"}[i%2]
			prompt := fmt.Sprintf("prompt %d: %s", i, strings.Repeat("x", i*3))
			maxTokens := 5 + i%20
			req := openai.Request{Model: model, Prompt: prompt, MaxTokens: maxTokens, Tenant: "t"}
			text, res, err := generate(context.Background(), s, req)
			if err != nil {
				t.Errorf("request %d: %v", i, err)
				return
			}
			want := gen.EmulatedOutput(model, "v1", prompt, testOutLen, maxTokens)
			if text != want {
				t.Errorf("request %d: text %q, want %q", i, text, want)
			}
			wantFinish := openai.FinishStop
			if len(want) == maxTokens {
				wantFinish = openai.FinishLength
			}
			if res.Finish != wantFinish || res.PromptTokens != len(prompt) {
				t.Errorf("request %d: %+v, want finish %s, %d prompt tokens", i, res, wantFinish, len(prompt))
			}
			mu.Lock()
			lengths[res.Finish]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if lengths[openai.FinishStop] == 0 || lengths[openai.FinishLength] == 0 {
		t.Errorf("finishes %v: want both kinds", lengths)
	}
	for _, m := range s.Models() {
		waitIdle(t, s, m, 5*time.Second)
	}
	if st := s.Stats("tiny"); st.Tokens == 0 || st.Steps == 0 {
		t.Errorf("tiny: %+v: no tokens or steps counted", st)
	}
}

// TestCancelFreesBlocks: a client that goes away after its first token
// ends its request (ctx's error), and the scheduler frees the sequence's
// blocks: its state goes back to nothing in flight.
func TestCancelFreesBlocks(t *testing.T) {
	cfg := testConfig()
	cfg.OutLen = gen.Lognormal{Median: 1000, Max: 1000} // it never ends on its own
	// 100 tokens take 2 s: the request would not end on its own within
	// the 1 s the test waits for its blocks.
	cfg.Gen.Cost.Base = 20 * time.Millisecond
	s := newService(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Generate(ctx, openai.Request{Model: "tiny", Prompt: "a long story", MaxTokens: 100}, func(string) error {
			select {
			case <-first:
			default:
				close(first)
			}
			return nil
		})
		done <- err
	}()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("no first token in 10 s")
	}
	if st := s.Stats("tiny"); st.InFlight != 1 || st.BlocksUsed == 0 {
		t.Fatalf("streaming: %+v, want 1 in flight holding blocks", st)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Generate after cancel: %v", err)
	}
	waitIdle(t, s, "tiny", time.Second)
}

// TestRefusals: what a request the schedulers refuse is answered with.
func TestRefusals(t *testing.T) {
	cfg := testConfig()
	cfg.OutLen = gen.Lognormal{Median: 1000, Max: 1000}
	cfg.Gen.Cost.Base = 5 * time.Millisecond
	cfg.Gen.Tenants = []actors.TenantConfig{{Name: "one", InflightMax: 1}}
	cfg.InFlightMax = 4
	s := newService(t, cfg)
	ctx := context.Background()
	status := func(err error) (int, *openai.Error) {
		var e *openai.Error
		if !errors.As(err, &e) {
			return 0, nil
		}
		return e.Status, e
	}
	// Prompt plus max_tokens past a device's KV cache (64 blocks of 4).
	_, _, err := generate(ctx, s, openai.Request{Model: "tiny", Prompt: strings.Repeat("p", 200), MaxTokens: 100})
	if st, _ := status(err); st != http.StatusBadRequest {
		t.Errorf("prompt too long for the KV cache: %v, want 400", err)
	}
	if _, _, err := generate(ctx, s, openai.Request{Model: "nope", Prompt: "x", MaxTokens: 1}); err == nil {
		t.Error("unknown model: no error")
	} else if st, _ := status(err); st != http.StatusNotFound {
		t.Errorf("unknown model: %v, want 404", err)
	}
	// Four requests in Generate (InFlightMax): a fifth is refused before
	// the scheduler (503, Retry-After).
	hold, release := context.WithCancel(ctx)
	defer release()
	var wg sync.WaitGroup
	for _, tenant := range []string{"one", "two", "three"} {
		holdOne(t, s, hold, &wg, openai.Request{Model: "tiny", Prompt: "hold " + tenant, MaxTokens: 100, Tenant: tenant})
	}
	// Tenant "one" may have one request in flight (per model): a second
	// is 429.
	_, _, err = generate(ctx, s, openai.Request{Model: "tiny", Prompt: "x", MaxTokens: 1, Tenant: "one"})
	if st, e := status(err); st != http.StatusTooManyRequests || e.Code != "quota_exceeded" {
		t.Errorf("tenant over its in-flight quota: %v, want 429 quota_exceeded", err)
	}
	holdOne(t, s, hold, &wg, openai.Request{Model: "small", Prompt: "hold four", MaxTokens: 100, Tenant: "four"})
	_, _, err = generate(ctx, s, openai.Request{Model: "small", Prompt: "x", MaxTokens: 1, Tenant: "five"})
	if st, e := status(err); st != http.StatusServiceUnavailable || e.RetryAfter <= 0 {
		t.Errorf("past InFlightMax: %v, want 503 with a retry hint", err)
	}
	release()
	wg.Wait()
	waitIdle(t, s, "tiny", 5*time.Second)
	s.Drain()
	if _, _, err := generate(ctx, s, openai.Request{Model: "tiny", Prompt: "x", MaxTokens: 1}); func() int { st, _ := status(err); return st }() != http.StatusServiceUnavailable {
		t.Errorf("draining: %v, want 503", err)
	}
}

// holdOne starts req on s under ctx and returns once its first token is
// out; wg counts its Generate.
func holdOne(t *testing.T, s *Service, ctx context.Context, wg *sync.WaitGroup, req openai.Request) {
	t.Helper()
	first := make(chan struct{})
	var once sync.Once
	wg.Go(func() {
		_, _ = s.Generate(ctx, req, func(string) error {
			once.Do(func() { close(first) })
			return nil
		})
	})
	select {
	case <-first:
	case <-time.After(10 * time.Second):
		t.Fatalf("%+v: no first token in 10 s", req)
	}
}

// TestTokensOnceInOrder: the reply endpoint keeps each index once and in
// order: a repeat, a gap and a token after the end are dropped.
func TestTokensOnceInOrder(t *testing.T) {
	s := &Service{streams: map[uint64]*stream{}}
	st := &stream{max: 10, wake: make(chan struct{}, 1)}
	s.streams[7] = st
	for _, m := range []actors.Message{
		gen.Token{ID: 7, Index: 0, Byte: 'a'},
		gen.Token{ID: 7, Index: 0, Byte: 'x'}, // repeat
		gen.Token{ID: 7, Index: 2, Byte: 'y'}, // gap
		gen.Token{ID: 7, Index: 1, Byte: 'b'},
		gen.Token{ID: 8, Index: 2, Byte: 'z'}, // another request's, gone
		gen.End{ID: 7, Outcome: actors.Completed, Tokens: 2},
		gen.Token{ID: 7, Index: 2, Byte: 'c'}, // after the end
	} {
		s.deliver(m)
	}
	if string(st.out) != "ab" || st.end == nil || st.end.Tokens != 2 {
		t.Errorf("stream %q, end %+v; want \"ab\" and the end", st.out, st.end)
	}
}

// recordStep is a backend that answers every sampling slot with the last
// digit of its seed ('0' + seed mod 10, or 'g' when greedy) and records
// the slots it ran, per model and device.
type recordStep struct {
	name string
	mu   *sync.Mutex
	log  *[]string
}

func (r recordStep) Step(job gen.StepJob) gen.StepDone {
	out := make([]gen.StepOut, len(job.Slots))
	for i, sl := range job.Slots {
		r.mu.Lock()
		*r.log = append(*r.log, fmt.Sprintf("%s t=%v s=%d", r.name, sl.Temperature, sl.Seed))
		r.mu.Unlock()
		out[i].Token = 'g'
		if sl.Temperature > 0 {
			out[i].Token = byte('0' + sl.Seed%10)
		}
	}
	return gen.StepDone{ID: job.ID, Out: out}
}

func (recordStep) Reset() {}

// With NewStep, the devices run the backend it makes, one per device of
// each model, and each request's temperature and seed reach every slot of
// its sequence.
func TestNewStepCarriesSampling(t *testing.T) {
	var mu sync.Mutex
	var log []string
	made := map[string]bool{}
	cfg := testConfig()
	cfg.NewStep = func(model string, device int) (Step, error) {
		name := fmt.Sprintf("%s/%d", model, device)
		made[name] = true
		return recordStep{name: name, mu: &mu, log: &log}, nil
	}
	s := newService(t, cfg)
	if len(made) != 4 {
		t.Fatalf("backends made: %v, want tiny and small on devices 0 and 1", made)
	}
	ctx := context.Background()
	text, _, err := generate(ctx, s, openai.Request{Model: "tiny", Prompt: "abc", MaxTokens: 5, Temperature: 0.5, Seed: 1237})
	if err != nil || text != "77777" {
		t.Fatalf("sampled: %q, %v: want 77777", text, err)
	}
	if text, _, err = generate(ctx, s, openai.Request{Model: "small", Prompt: "abc", MaxTokens: 3, Seed: 5}); err != nil || text != "ggg" {
		t.Fatalf("greedy: %q, %v: want ggg", text, err)
	}
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, l := range log {
		if !strings.HasSuffix(l, " t=0.5 s=1237") && !strings.HasSuffix(l, " t=0 s=5") {
			t.Errorf("slot %s: want t=0.5 s=1237 or t=0 s=5", l)
		}
		n++
	}
	if n < 5+3 {
		t.Errorf("%d slots ran, want a slot per token at least", n)
	}
}

// The autoscaling signal: with every device's one sequence slot taken and
// four requests queued, the queued ones' TTFT slack is negative (no
// device can admit them) and the KV use above zero, so one device more is
// recommended, on /metrics too; once all is done, the KV use is 0, no
// slack is exported, and one device fewer is recommended. Deliberate
// break: gen.Recommend ignoring the slack (`p.Queued > 0 && p.SlackP10 <
// c.SlackUp` removed) recommends 2 under the queue.
func TestAutoscaleSignal(t *testing.T) {
	cfg := testConfig()
	cfg.Models = []string{"tiny"}
	cfg.Gen.SeqsMax = 1
	// Each request holds its device for 20 steps of 30 ms: the queue of
	// four lasts 600 ms, six times the signal's period.
	cfg.Gen.Cost.Base = 30 * time.Millisecond
	cfg.OutLen = gen.Lognormal{Median: 20, Max: 20}
	s := newService(t, cfg)
	reg := prometheus.NewRegistry()
	reg.MustRegister(s.Collectors()...)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			if _, _, err := generate(context.Background(), s, openai.Request{Model: "tiny", Prompt: fmt.Sprintf("p%d", i), MaxTokens: 20}); err != nil {
				t.Error(err)
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	var st Stats
	for st = s.Stats("tiny"); st.Pressure.Queued < 4 && time.Now().Before(deadline); st = s.Stats("tiny") {
		runtime.Gosched()
	}
	if st.Pressure.Queued != 4 || st.Pressure.SlackMin >= 0 || st.Pressure.KVUsed <= 0 || st.DevicesRecommended != 3 {
		t.Fatalf("under a queue: %+v, want 4 queued, negative slack, KV held, 3 devices recommended", st)
	}
	text := gather(t, reg)
	for _, want := range []string{`batchd_gen_devices_recommended{model="tiny"} 3`, `batchd_gen_ttft_slack_seconds{model="tiny",quantile="0"} -`, `batchd_gen_kv_pressure{model="tiny"} 0.`} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics under a queue lacks %q:\n%s", want, text)
		}
	}
	wg.Wait()
	for st = s.Stats("tiny"); st.InFlight > 0 && time.Now().Before(deadline); st = s.Stats("tiny") {
		runtime.Gosched()
	}
	if st.Pressure != (gen.Pressure{}) || st.DevicesRecommended != 1 {
		t.Fatalf("idle: %+v, want no pressure and 1 device recommended", st)
	}
	if text := gather(t, reg); strings.Contains(text, "batchd_gen_ttft_slack_seconds") || !strings.Contains(text, `batchd_gen_devices_recommended{model="tiny"} 1`) {
		t.Errorf("/metrics idle: want no slack and 1 device recommended:\n%s", text)
	}
}

// gather renders reg's gauges as lines of name{label="value",...} value.
func gather(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			fmt.Fprintf(&b, "%s{%s} %v\n", mf.GetName(), strings.Join(labels, ","), m.GetGauge().GetValue())
		}
	}
	return b.String()
}
