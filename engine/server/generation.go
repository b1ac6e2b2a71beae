package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/batchd/batchd/actors/gen"
	"github.com/batchd/batchd/cudabridge"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/generate"
	"github.com/batchd/batchd/engine/httpapi"
	"github.com/batchd/batchd/engine/openai"
)

// genWriteSlack is the time a generation response may take to write past
// its body's read and its generation's deadline.
const genWriteSlack = 10 * time.Second

// openGeneration starts the generation service when the file enables it,
// and adds its series to hcfg's /metrics.
func (s *Server) openGeneration(hcfg *httpapi.Config, log *slog.Logger) error {
	g := s.f.Generation
	if !g.Enabled {
		return nil
	}
	gcfg := generate.Config{
		Models: g.Models, Gen: s.f.GenConfig(), OutLen: s.f.GenOutputLen(),
		Seed: s.f.Engine.Seed, Logger: log,
	}
	if g.Backend == config.GenBackendBytenet {
		gcfg.NewStep = newBytenetGen
	}
	gen, err := generate.New(gcfg)
	if err != nil {
		return fmt.Errorf("generation: %w", err)
	}
	s.gen = gen
	log.Info("generation on: /v1/completions, /v1/chat/completions, /v1/models", "backend", g.Backend, "models", g.Models, "devices", g.Devices,
		"static", g.Static, "ttft_slo", g.TTFTSLO)
	hcfg.Collectors = append(hcfg.Collectors, gen.Collectors()...)
	return nil
}

// bytenetGen is bytenet's CPU generator as a generation device: every
// model name served is that one network, so each step is handed over as
// bytenet's (the generator refuses any other model). Each slot is sampled
// by its request's temperature and seed; a stream ends at max_tokens (no
// stop byte).
type bytenetGen struct{ g *cudabridge.Gen }

func newBytenetGen(string, int) (generate.Step, error) {
	g, err := cudabridge.NewGen(cudabridge.GenOptions{})
	if err != nil {
		return nil, fmt.Errorf("bytenet generator: %w", err)
	}
	return bytenetGen{g}, nil
}

func (b bytenetGen) Step(job gen.StepJob) gen.StepDone {
	job.Model, job.Version = cudabridge.ModelName, cudabridge.ModelVersion
	return b.g.Step(job)
}

func (b bytenetGen) Reset() { b.g.Reset() }

// rootHandler is what the listener serves: with generation on, the
// OpenAI-compatible routes beside the rest of the API (h), whose API keys
// they share; without, h alone.
func (s *Server) rootHandler(h *httpapi.Handler) http.Handler {
	if s.gen == nil {
		return h
	}
	g, hc := s.f.Generation, s.f.HTTP
	oai := openai.New(s.gen, openai.Config{
		MaxTokensLimit: g.TokensMax,
		BodyMaxBytes:   hc.BodyMaxBytes,
		// The bearer keys and tenants of the rest of the API: 401 for a
		// missing or unknown key once there are keys, else the open
		// default tenant.
		Authenticate: func(r *http.Request) (openai.Caller, *openai.Error) {
			c, e := h.Authenticate(r.Header.Get("Authorization"))
			if e != nil {
				return openai.Caller{}, &openai.Error{Status: e.Status, Type: "invalid_request_error", Code: "invalid_api_key", Message: e.Message}
			}
			// A key restricted to some models (api_keys[].models) is
			// restricted to them here too: 403 for another.
			return openai.Caller{Tenant: c.Tenant(), Models: c.Models()}, nil
		},
		Logger: s.log,
	})
	// The connection's deadlines, as httpapi sets its own per request:
	// the body within body_read_timeout, the whole response within the
	// generation's deadline and some slack.
	bodyRead, write := hc.BodyReadTimeout, hc.BodyReadTimeout+g.Timeout+genWriteSlack
	bounded := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		now := time.Now()
		_ = rc.SetWriteDeadline(now.Add(write))
		if r.ContentLength != 0 {
			_ = rc.SetReadDeadline(now.Add(bodyRead))
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
		}
		oai.ServeHTTP(w, r)
	})
	// Exact paths: /v1/models/{model}/infer and the rest stay httpapi's,
	// which answers a path that is not canonical with its own JSON 404. A
	// switch, not a ServeMux: the mux's matching in front of every request
	// was 4% of a saturated server's CPU.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/models", "/v1/completions", "/v1/chat/completions":
			bounded.ServeHTTP(w, r)
		default:
			h.ServeHTTP(w, r)
		}
	})
}

// deadlineBody clears the connection's read deadline once the body is
// read: past it net/http would end the request's context while the
// response streams.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// closeGeneration stops the generation service, within its own bound.
func (s *Server) closeGeneration() error {
	if s.gen == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeEngineMax)
	defer cancel()
	if err := s.gen.Close(ctx); err != nil {
		return fmt.Errorf("generation: %w", err)
	}
	return nil
}
