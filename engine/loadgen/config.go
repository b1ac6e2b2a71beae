package loadgen

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"
)

// Arrival is the open-loop arrival process.
type Arrival uint8

const (
	// Poisson arrivals: exponential gaps with mean 1/Rate, the traffic of
	// many independent clients.
	Poisson Arrival = iota
	// Fixed arrivals: exactly 1/Rate apart.
	Fixed
)

func (a Arrival) String() string {
	if a == Fixed {
		return "fixed"
	}
	return "poisson"
}

// ParseArrival reads "poisson" or "fixed".
func ParseArrival(s string) (Arrival, error) {
	switch s {
	case "poisson":
		return Poisson, nil
	case "fixed", "constant":
		return Fixed, nil
	}
	return 0, fmt.Errorf("arrival %q: want poisson or fixed", s)
}

// Config configures a run.
type Config struct {
	// URL is the server's base URL. Default http://127.0.0.1:8080.
	URL string
	// AllowRemote permits a URL that is not a loopback address. Off by
	// default, so a typo does not load someone else's server.
	AllowRemote bool
	// Model and Version name what to call: POST
	// {URL}/v1/models/{Model}/infer, with "version" in the body when set.
	// Default model "echo", no version.
	Model, Version string
	// APIKey, when set, is sent as "Authorization: Bearer APIKey".
	APIKey string
	// TimeoutMs, when positive, is sent as the request's own timeout_ms.
	TimeoutMs int

	// Rate is the open-loop arrival rate in requests per second. Default
	// 1000.
	Rate float64
	// Arrival is the open-loop arrival process. Default Poisson.
	Arrival Arrival
	// Duration is how long requests are sent. Default 10 s, at most
	// DurationMax.
	Duration time.Duration
	// Warmup is a first stretch of the run whose requests are sent but not
	// counted (connections opening, caches filling). Default 0.
	Warmup time.Duration
	// InFlightMax caps the open-loop requests in flight at once. A
	// request due while all are busy waits in the backlog (its wait counts
	// in its latency); one due while the backlog is full is dropped and
	// counted. Default 10,000.
	InFlightMax int
	// Connections, when positive, switches to a closed loop: this many
	// connections each send a request as soon as the previous one is
	// answered, for Duration. Rate and Arrival are then unused.
	Connections int
	// Timeout bounds one request; past it the request counts as a
	// transport error. Default 10 s.
	Timeout time.Duration

	// InputLen is the length of each input in bytes: a sequence number
	// padded with 'x'. Default 16.
	InputLen int
	// Check verifies each 200 response's output against the emulated
	// backend's function of (model, version, input), so a misrouted reply
	// is counted. Default on.
	Check bool
	// Seed seeds the Poisson gaps.
	Seed uint64
	// Interval is the width of the report's time series. Default 1 s.
	Interval time.Duration
	// GRPC, when set, is the host:port of a gRPC server (batchd serve
	// --grpc-addr): the load goes to the Open Inference Protocol's
	// ModelInfer there, one element with raw contents a request, instead
	// of to URL. Loopback only, as URL, unless AllowRemote.
	GRPC string
	// GRPCStream sends the gRPC load over ModelStreamInfer streams (4,
	// round robin, many requests in flight on each, matched by id).
	GRPCStream bool
	// GRPCConns is how many connections the gRPC load spreads over
	// (round robin; with GRPCStream, 4 streams on each); 0 is 1. A
	// connection's frames are read by one goroutine and written by
	// another at each end, so one connection can cap a many-core server
	// below what the server itself takes.
	GRPCConns int
	// RSSPID, when positive, is a process whose resident memory (VmRSS in
	// /proc/PID/status) is sampled every Interval into the time series.
	RSSPID int
	// SlowOver, when positive, adds to the report's split of the 200s'
	// time (Report.Split) a row for those slower than it: where a tail
	// spends its time. Default 0: the row for all 200s only.
	SlowOver time.Duration
	// IdleConns, when positive, is how many more kept-alive connections
	// the run opens before it starts (each sends one request, not
	// counted) and holds idle to its end: a server's clients that are
	// connected but quiet. REST only.
	IdleConns int

	// backlog, when positive, replaces the backlog's size (tests).
	backlog int
}

// Bounds on a run, so a typo cannot start an unbounded one.
const (
	DurationMax    = 10 * time.Minute
	RateMax        = 1_000_000
	InFlightMaxMax = 100_000
	ConnectionsMax = 10_000
	GRPCConnsMax   = 256
	InputLenMax    = 1 << 20
	// backlogMax bounds the open-loop requests due but not yet sent (8
	// bytes each).
	backlogMax = 1 << 17
)

// DefaultConfig returns a 10 s Poisson run at 1000 req/s against the
// embedded default server's model on 127.0.0.1:8080.
func DefaultConfig() Config {
	return Config{
		URL:         "http://127.0.0.1:8080",
		Model:       "echo",
		Rate:        1000,
		Arrival:     Poisson,
		Duration:    10 * time.Second,
		InFlightMax: 10_000,
		Timeout:     10 * time.Second,
		InputLen:    16,
		Check:       true,
		Interval:    time.Second,
		GRPCConns:   1,
	}
}

// ErrRemote is returned by Validate for a URL that is not on loopback
// while AllowRemote is off.
var ErrRemote = errors.New("not a loopback address")

// Validate reports the first setting that makes the run unusable.
func (c Config) Validate() error {
	u, err := url.Parse(c.URL)
	switch {
	case err != nil:
		return fmt.Errorf("load config: URL %q: %w", c.URL, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("load config: URL %q: want http:// or https://", c.URL)
	case u.Host == "":
		return fmt.Errorf("load config: URL %q: no host", c.URL)
	case !c.AllowRemote && !isLoopback(u.Hostname()):
		return fmt.Errorf("load config: URL %q: %w (allow it with AllowRemote, --allow-remote)", c.URL, ErrRemote)
	case c.Model == "" || strings.ContainsAny(c.Model, "/?#"):
		return fmt.Errorf("load config: Model %q: want a non-empty path segment", c.Model)
	case c.Duration <= 0 || c.Duration > DurationMax:
		return fmt.Errorf("load config: Duration %v: want (0, %v]", c.Duration, DurationMax)
	case c.Warmup < 0 || c.Warmup >= c.Duration:
		return fmt.Errorf("load config: Warmup %v: want [0, Duration)", c.Warmup)
	case c.Connections < 0 || c.Connections > ConnectionsMax:
		return fmt.Errorf("load config: Connections %d: want 0 (open loop) to %d", c.Connections, ConnectionsMax)
	case c.Connections == 0 && !(c.Rate > 0 && c.Rate <= RateMax):
		return fmt.Errorf("load config: Rate %v: want (0, %d]", c.Rate, RateMax)
	case c.Connections == 0 && (c.InFlightMax < 1 || c.InFlightMax > InFlightMaxMax):
		return fmt.Errorf("load config: InFlightMax %d: want 1 to %d", c.InFlightMax, InFlightMaxMax)
	case c.Arrival > Fixed:
		return fmt.Errorf("load config: unknown Arrival %d", c.Arrival)
	case c.Timeout <= 0 || c.Timeout > DurationMax:
		return fmt.Errorf("load config: Timeout %v: want (0, %v]", c.Timeout, DurationMax)
	case c.InputLen < 1 || c.InputLen > InputLenMax:
		return fmt.Errorf("load config: InputLen %d: want 1 to %d", c.InputLen, InputLenMax)
	case c.TimeoutMs < 0:
		return fmt.Errorf("load config: TimeoutMs %d: must not be negative", c.TimeoutMs)
	case c.Interval < 10*time.Millisecond || c.Interval > c.Duration:
		return fmt.Errorf("load config: Interval %v: want 10ms to Duration", c.Interval)
	case c.GRPCConns < 0 || c.GRPCConns > GRPCConnsMax:
		return fmt.Errorf("load config: GRPCConns %d: want 1 to %d (0: 1)", c.GRPCConns, GRPCConnsMax)
	case c.GRPCConns > 1 && c.GRPC == "":
		return fmt.Errorf("load config: GRPCConns without GRPC: name the gRPC server")
	case c.GRPCStream && c.GRPC == "":
		return fmt.Errorf("load config: GRPCStream without GRPC: name the gRPC server")
	case c.GRPC != "" && !c.AllowRemote && !grpcLoopback(c.GRPC):
		return fmt.Errorf("load config: GRPC %q: %w (allow it with AllowRemote, --allow-remote)", c.GRPC, ErrRemote)
	case c.RSSPID < 0:
		return fmt.Errorf("load config: RSSPID %d: must not be negative", c.RSSPID)
	case c.SlowOver < 0 || c.SlowOver > c.Timeout:
		return fmt.Errorf("load config: SlowOver %v: want 0 (off) to Timeout", c.SlowOver)
	case c.IdleConns < 0 || c.IdleConns > ConnectionsMax:
		return fmt.Errorf("load config: IdleConns %d: want 0 to %d", c.IdleConns, ConnectionsMax)
	case c.IdleConns > 0 && c.GRPC != "":
		return fmt.Errorf("load config: IdleConns with GRPC: idle connections are REST's")
	}
	return nil
}

// isLoopback reports whether host is "localhost" or a loopback IP. Other
// names are not resolved: what a name resolves to can change.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// grpcLoopback reports whether a gRPC target host:port is on loopback.
func grpcLoopback(target string) bool {
	host, _, err := net.SplitHostPort(target)
	return err == nil && isLoopback(host)
}
