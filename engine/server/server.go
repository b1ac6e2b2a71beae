package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/engine"
	"github.com/batchd/batchd/engine/autoscale"
	"github.com/batchd/batchd/engine/config"
	"github.com/batchd/batchd/engine/fastlane"
	"github.com/batchd/batchd/engine/generate"
	"github.com/batchd/batchd/engine/grpcapi"
	"github.com/batchd/batchd/engine/httpapi"
	"github.com/batchd/batchd/engine/rawtcp"
)

// ErrClosed is Serve's answer once Shutdown has begun.
var ErrClosed = errors.New("server: closed")

// engineStartMax bounds the wait for the devices to register at start.
const engineStartMax = 30 * time.Second

// closeEngineMax bounds stopping the engine's actors after the drain.
const closeEngineMax = 10 * time.Second

// Options are what a node takes besides its configuration file.
type Options struct {
	// Logger gets the server's log; nil discards it. The actor libraries'
	// own records reach it at warn level and above only: they log at info
	// about every actor.
	Logger *slog.Logger
	// Record, when Record.Path is set, records every request for replay.
	Record RecordOptions
}

// Server is one batchd node: the engine, its backends, the HTTP API, the
// durable jobs, the recorder and the metrics, assembled from one
// configuration file. Make it with New, run it with Serve, stop it with
// Shutdown (see the package doc for the order of both).
type Server struct {
	f       *config.File
	log     *slog.Logger
	latency time.Duration // a batch of one's predicted time, for the log

	// What New opened, in the order it opened them; Shutdown releases
	// every one that is not nil.
	closeBackends func()
	js            *jobService
	eng           *engine.Engine
	// scale is the live autoscaling recommendation, with autoscale in
	// the config; scaleStop ends its Run and scaleDone closes after.
	scale       *autoscale.Recommender
	scaleStop   context.CancelFunc
	scaleDone   chan struct{}
	closeRecord func() error
	// gen serves generation, when the file enables it.
	gen *generate.Service
	h   *httpapi.Handler
	ln  *quietListener
	srv *http.Server
	// web serves ln: srv, or the fast lane in front of it
	// (http.fast_lane).
	web webServer
	// The gRPC server and its listener, when f.GRPC.Addr is set.
	gsrv *grpcapi.Server
	gln  net.Listener
	// cn is the node's cluster membership, when f.Cluster.Node is set;
	// dp its data plane, when f.Cluster.DataAddr is set too.
	cn *clusterNode
	dp *dataPlane

	mu          sync.Mutex
	serving     bool
	stopStarted bool
	stopping    chan struct{} // closed when Shutdown begins
	stopped     chan struct{} // closed when Shutdown has finished
	stopErr     error         // Shutdown's result, set before stopped closes
	serveDone   chan struct{} // closed when the HTTP server's Serve returned
	serveErr    error         // its error, set before serveDone closes
	gserveDone  chan struct{} // closed when the gRPC server's Serve returned
	gserveErr   error         // its error, set before gserveDone closes
	// serveFailed: Serve returns serveErr itself (it came before any stop).
	serveFailed  bool
	stopRelease  context.CancelFunc
	releaseEnded chan struct{}
}

// New assembles a node from f and starts everything but the serving: the
// backends f.Devices.Backend names (a missing GPU stops the start), the
// job store (a damaged or locked file stops it), the engine (ctx bounds
// its start, and at most engineStartMax), the recorder, the HTTP handler,
// the job runner, and the listener on f.HTTP.Addr (Addr tells the port
// when it was 0). For the cpu and cuda backends it first makes f serve
// the bytenet model, and for cuda one device per visible GPU: f is
// changed in place. On an error, what was opened is released again.
func New(ctx context.Context, f *config.File, opts Options) (*Server, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{f: f, log: log, stopping: make(chan struct{}), stopped: make(chan struct{})}
	if err := s.open(ctx, opts); err != nil {
		// Nothing has been served: the stop only releases.
		cctx, cancel := context.WithTimeout(context.Background(), f.HTTP.ShutdownTimeout)
		defer cancel()
		return nil, errors.Join(err, s.Shutdown(cctx))
	}
	return s, nil
}

// open is New's work; what it opened is in s, for Shutdown to release.
func (s *Server) open(ctx context.Context, opts Options) error {
	f, log := s.f, s.log
	// The backends are set up first; they are released once the engine
	// has stopped.
	ecfg, closeBackends, backendCollectors, err := engineConfig(f, log)
	if err != nil {
		return err
	}
	s.closeBackends = closeBackends
	ecfg.Logger = slog.New(warnOnly{log.Handler()})
	s.latency = ecfg.Device.Latency.Predict(1, 0)
	hcfg, err := f.HTTPConfig()
	if err != nil {
		return err
	}
	// The job store opens before anything runs, and closes last but for
	// the backends, once the runner has stopped.
	if s.js, err = openJobs(f, log); err != nil {
		return err
	}

	// The data plane listens before the engine starts: the engine sends
	// through it from its first message.
	if f.Clustered() && f.Cluster.DataAddr != "" {
		if s.dp, err = openDataPlane(f); err != nil {
			return err
		}
		s.dp.stopFaults = s.dp.faultSignals(log)
		ecfg.Node = f.Cluster.Node
		ecfg.Cluster = &engine.ClusterConfig{Incarnation: s.dp.inc, Remote: s.dp.tr, Forwarded: s.dp.forwarded}
	}
	startCtx, cancel := context.WithTimeout(ctx, engineStartMax)
	eng, err := engine.New(startCtx, ecfg)
	cancel()
	if err != nil {
		return fmt.Errorf("start engine: %w", err)
	}
	s.eng = eng
	if s.dp != nil {
		s.dp.eng.Store(eng)
	}

	hcfg.Logger = log
	// Ready means a request for the model can be served now: a device
	// that holds it is up, not merely registered.
	hcfg.Ready = func(_ context.Context, model string) bool { return eng.Ready(model) }
	// The load signals come from the engine when it offers them.
	if sig, ok := any(eng).(interface {
		Signals(context.Context) (actors.Signals, error)
	}); ok {
		hcfg.Signals = sig.Signals
	}
	// /metrics labels devices by their index in this list, from 0.
	hcfg.Devices = eng.Devices()
	hcfg.Collectors = append(hcfg.Collectors, backendCollectors...)
	hcfg.Collectors = append(hcfg.Collectors, s.laneCollectors()...)
	// A node of a cluster joins it once its devices are up, so it is
	// never seen without them.
	if f.Clustered() {
		if s.cn, err = startCluster(f, len(hcfg.Devices), s.dp, log); err != nil {
			return err
		}
		hcfg.Cluster = func() any { return s.cn.status() }
		hcfg.Collectors = append(hcfg.Collectors, s.cn.collectors()...)
		if s.dp != nil {
			hcfg.Collectors = append(hcfg.Collectors, s.dp.collectors()...)
		}
	}
	if a := f.Autoscale; a != nil {
		s.scale, err = autoscale.New(autoscale.Config{
			Policy: a.Config(), Every: a.Every, Devices: len(hcfg.Devices), Signals: eng.Signals,
		})
		if err != nil {
			return err
		}
		hcfg.Autoscale = s.scale
	}
	// With a recording, the handler and the job runner call the engine
	// through the recorder, which is closed (flushed) once every request
	// has been answered.
	door, closeRecord, err := openRecord(opts.Record, eng, log)
	if err != nil {
		return err
	}
	s.closeRecord = closeRecord
	hcfg.Jobs = s.js.newRunner(door)
	if err := s.openGeneration(&hcfg, log); err != nil {
		return err
	}
	if s.h, err = httpapi.New(door, hcfg); err != nil {
		return fmt.Errorf("http handler: %w", err)
	}
	if err := s.js.start(); err != nil {
		return err
	}
	tcp, err := net.Listen("tcp", f.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	s.ln = &quietListener{Listener: rawtcp.Listener{Listener: tcp}}
	s.srv = httpapi.NewServer(s.ln.Addr().String(), s.rootHandler(s.h))
	s.srv.ReadHeaderTimeout = f.HTTP.ReadHeaderTimeout
	s.srv.IdleTimeout = f.HTTP.IdleTimeout
	s.srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	s.web = s.srv
	if f.HTTP.FastLane {
		s.web = fastlane.New(s.srv, fastlane.Config{Fast: s.h.FastRoute, BodyMaxBytes: int(min(f.HTTP.BodyMaxBytes, 64<<10)),
			ParkAfter: f.HTTP.ParkAfter, Logger: log})
	}
	if f.GRPC.Addr == "" {
		return nil
	}
	gcfg := f.GRPCConfig()
	gcfg.Logger = log
	if s.gsrv, err = grpcapi.New(s.h, gcfg); err != nil {
		return fmt.Errorf("grpc server: %w", err)
	}
	gln, err := net.Listen("tcp", f.GRPC.Addr)
	if err != nil {
		return fmt.Errorf("listen grpc: %w", err)
	}
	s.gln = rawtcp.Listener{Listener: gln}
	return nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// GRPCAddr is the address the gRPC server listens on, nil when it serves
// no gRPC (grpc.addr empty).
func (s *Server) GRPCAddr() net.Addr {
	if s.gln == nil {
		return nil
	}
	return s.gln.Addr()
}

// ClusterAddr is where the node gossips, what another node joins ("" when
// it is a single node).
func (s *Server) ClusterAddr() string {
	if s.cn == nil {
		return ""
	}
	return s.cn.ml.Addr()
}

// Serve serves HTTP until ctx ends, Shutdown is called, or the listener
// fails. When ctx ends or the listener fails it stops the server itself,
// gracefully, within f.HTTP.ShutdownTimeout, and returns that stop's
// error too; when Shutdown is called it returns nil once the stop is
// done (Shutdown's caller gets the stop's error). Serve runs at most
// once; after Shutdown has begun it returns ErrClosed.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.serving || s.stopStarted {
		s.mu.Unlock()
		return ErrClosed
	}
	s.serving = true
	s.serveDone = make(chan struct{})
	s.releaseEnded = make(chan struct{})
	relCtx, stopRelease := context.WithCancel(context.Background())
	s.stopRelease = stopRelease
	go func() {
		defer close(s.releaseEnded)
		releaseOnFall(relCtx, s.eng.Requests, s.log)
	}()
	go func() {
		defer close(s.serveDone)
		s.serveErr = s.web.Serve(s.ln)
	}()
	if s.scale != nil {
		var sctx context.Context
		sctx, s.scaleStop = context.WithCancel(context.Background())
		s.scaleDone = make(chan struct{})
		go func() {
			defer close(s.scaleDone)
			s.scale.Run(sctx)
		}()
	}
	grpcAddr := ""
	if s.gsrv != nil {
		grpcAddr = s.gln.Addr().String()
		s.gserveDone = make(chan struct{})
		go func() {
			defer close(s.gserveDone)
			s.gserveErr = s.gsrv.Serve(s.gln)
		}()
	}
	s.mu.Unlock()

	f := s.f
	s.log.Info("serving", "addr", s.Addr().String(), "grpc_addr", grpcAddr, "runtime", engine.RuntimeName, "devices", f.Devices.Count,
		"latency", s.latency, "batch_max", f.Policy.BatchMax, "slo", f.Policy.SLO)
	var err error
	select {
	case <-s.stopping:
		<-s.stopped
		return nil
	case <-ctx.Done():
	case <-s.serveDone:
		s.mu.Lock()
		stopping := s.stopStarted
		s.serveFailed = !stopping
		s.mu.Unlock()
		if stopping {
			// Shutdown closed it: its caller gets the stop's error.
			<-s.stopped
			return nil
		}
		err = fmt.Errorf("serve: %w", s.serveErr)
		s.log.Error("server failed; stopping", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.HTTP.ShutdownTimeout)
	defer cancel()
	return errors.Join(err, s.Shutdown(sctx))
}

// Shutdown stops the server gracefully within ctx (the engine's actors
// get closeEngineMax more) and releases everything New opened, in the
// order the package doc gives. It may be called whether or not Serve
// runs, and more than once: a later call waits for the first one's result
// (or its own ctx).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.stopStarted
	s.stopStarted = true
	serving, serveFailed := s.serving, s.serveFailed
	if first {
		close(s.stopping)
	}
	s.mu.Unlock()
	if !first {
		select {
		case <-s.stopped:
			return s.stopErr
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	s.stopErr = s.stop(ctx, serving, serveFailed)
	close(s.stopped)
	return s.stopErr
}

// stop is the stop, written in one place: the order is the package
// doc's (steps 1-5 within ctx, then 6-10). Every step skips what New did
// not open; serving says whether Serve started the HTTP server and the
// memory releaser, serveFailed whether Serve reported the HTTP server's
// failure itself.
func (s *Server) stop(ctx context.Context, serving, serveFailed bool) error {
	if s.eng != nil && serving {
		s.log.Info("stopping: admitting nothing new, draining queued work", "bound", s.f.HTTP.ShutdownTimeout)
	}
	var errs []error
	// A node that batches with others hands its models over before it
	// drains: told it leaves, their fronts move what waits here and send
	// nothing new (it leaves memberlist once its work is done, below).
	if s.cn != nil && s.dp != nil && serving {
		if err := s.cn.handOver(ctx, s.f.Cluster.HandoverGrace, s.dp.lastRemoteSubmit); err != nil {
			errs = append(errs, err)
		}
	}
	if s.h != nil {
		if err := s.h.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http handler: %w", err))
		}
	}
	if s.gen != nil {
		s.gen.Drain() // new generation requests get 503; those streaming go on
	}
	if s.js != nil {
		if err := s.js.stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("job runner: %w", err))
		}
	}
	if s.eng != nil {
		if err := s.eng.Drain(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
	}
	// gRPC stops beside HTTP, once the drain has answered its calls:
	// streams end (Unavailable), the rest is GracefulStop within ctx.
	switch {
	case s.gsrv != nil && serving:
		if err := s.gsrv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("grpc server: %w", err))
		}
		<-s.gserveDone
		if s.gserveErr != nil {
			errs = append(errs, fmt.Errorf("serve grpc: %w", s.gserveErr))
		}
	case s.gln != nil:
		if err := s.gln.Close(); err != nil {
			errs = append(errs, fmt.Errorf("grpc listener: %w", err))
		}
	}
	switch {
	case serving:
		awaitQuiet(ctx, s.ln.lastAccept, acceptQuiet, acceptQuiet, acceptDrainMax)
		if err := s.web.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http server: %w", err))
			_ = s.web.Close() // cut off what did not finish in time
		}
		<-s.serveDone
		if !serveFailed && !errors.Is(s.serveErr, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("serve: %w", s.serveErr))
		}
	case s.ln != nil:
		if err := s.ln.Close(); err != nil {
			errs = append(errs, fmt.Errorf("listener: %w", err))
		}
	}
	// A node of a cluster leaves once its work is done: the others see it
	// Left, not Dead.
	if s.cn != nil {
		if err := s.cn.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.scale != nil {
		// The recommendation stops reading the engine before it stops.
		if s.scaleStop != nil {
			s.scaleStop()
			<-s.scaleDone
		}
		cctx, cancel := context.WithTimeout(context.Background(), closeEngineMax)
		if err := s.scale.Close(cctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if err := s.closeGeneration(); err != nil {
		errs = append(errs, err)
	}
	if s.eng != nil {
		// The engine gets a bound of its own: stopping its goroutines
		// matters even when the drain used up the first.
		cctx, cancel := context.WithTimeout(context.Background(), closeEngineMax)
		if err := s.eng.Shutdown(cctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if s.dp != nil {
		// After the engine: its actors send through it to the last.
		s.dp.stopFaults()
		if err := s.dp.tr.Close(); err != nil {
			errs = append(errs, fmt.Errorf("data plane: %w", err))
		}
	}
	if s.closeRecord != nil {
		if err := s.closeRecord(); err != nil {
			s.log.Warn("record", "err", err)
		}
	}
	if serving {
		s.stopRelease()
		<-s.releaseEnded
	}
	if s.js != nil {
		s.js.close()
	}
	if s.closeBackends != nil {
		s.closeBackends()
	}
	err := errors.Join(errs...)
	if err == nil && serving {
		s.log.Info("stopped: every request answered")
	}
	return err
}

// Closing a listener resets the connections still in its accept queue:
// requests that clients have written and the server never read. In a test
// run on a loaded machine, 40 of 40 requests written just before a stop
// got EOF that way. So the drain's last step goes on accepting (the
// handler answers 503 draining) until no connection has come for
// acceptQuiet, for at most acceptDrainMax (and the shutdown's bound).
const (
	acceptQuiet    = 100 * time.Millisecond
	acceptDrainMax = 2 * time.Second
)

// laneCollectors are the fast lane's series for /metrics (zero with
// http.fast_lane off).
func (s *Server) laneCollectors() []prometheus.Collector {
	count := func(f func(*fastlane.Server) int64) func() float64 {
		return func() float64 {
			if l, ok := s.web.(*fastlane.Server); ok {
				return float64(f(l))
			}
			return 0
		}
	}
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "batchd_http_lane_requests_total",
			Help: "HTTP requests the fast lane served itself (http.fast_lane)."}, count((*fastlane.Server).Served)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "batchd_http_lane_handoffs_total",
			Help: "Connections the fast lane gave net/http, at a request it does not serve."}, count((*fastlane.Server).HandedOff)),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "batchd_http_lane_parkings_total",
			Help: "Times a kept-alive connection was parked (http.park_after)."}, count((*fastlane.Server).Parkings)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "batchd_http_lane_parked_connections",
			Help: "Kept-alive connections parked now: idle past http.park_after, waiting without a goroutine."},
			count(func(l *fastlane.Server) int64 { return int64(l.Parked()) })),
	}
}

// webServer serves the HTTP listener: *http.Server or *fastlane.Server.
type webServer interface {
	Serve(net.Listener) error
	Shutdown(context.Context) error
	Close() error
}

// quietListener is the server's listener; it notes when it last accepted.
type quietListener struct {
	net.Listener
	last atomic.Int64 // UnixNano of the latest accepted connection
}

func (l *quietListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.last.Store(time.Now().UnixNano())
	}
	return c, err
}

// lastAccept is when l last accepted a connection (1970: never).
func (l *quietListener) lastAccept() time.Time { return time.Unix(0, l.last.Load()) }

// awaitQuiet waits at least least, then until nothing has happened for
// quiet (last says when something last did), most at the longest, or until
// ctx ends; it returns how long it waited. The server's stop waits so for
// connections (lastAccept), a node handing its models over for the other
// nodes' requests (awaitHandover).
func awaitQuiet(ctx context.Context, last func() time.Time, least, quiet, most time.Duration) time.Duration {
	begin := time.Now()
	tick := time.NewTicker(quiet / 4)
	defer tick.Stop()
	for {
		now := time.Now()
		waited := now.Sub(begin)
		if waited >= least && (now.Sub(last()) >= quiet || waited >= most) {
			return waited
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return time.Since(begin)
		}
	}
}

// warnOnly passes on records at warn level and above.
type warnOnly struct{ slog.Handler }

func (w warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{w.Handler.WithAttrs(as)} }
func (w warnOnly) WithGroup(g string) slog.Handler       { return warnOnly{w.Handler.WithGroup(g)} }
