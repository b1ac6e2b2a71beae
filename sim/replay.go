package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"time"

	"github.com/batchd/batchd/actors"
	"github.com/batchd/batchd/sim/ledger"
)

// ReplayRequest is one recorded request to offer again: its arrival and
// everything that decides how it is batched, and its input text if the
// recording has it (else the replay makes one up at the recorded length).
type ReplayRequest struct {
	// Arrival is the time the request arrives in the replay.
	Arrival  time.Duration
	Tenant   string
	Model    string
	Version  string
	Params   string
	Priority int8
	// Timeout is the request's own deadline after its arrival; zero
	// leaves the batcher's SLO.
	Timeout time.Duration
	// InputLen is the input's length in bytes, at least 1.
	InputLen int
	// Input, when not empty, is the recorded input text (serve
	// --record-inputs), offered as it was; InputLen is then its length.
	// Empty: the replay makes up InputLen random letters.
	Input string
}

// ReplayLimit bounds the requests of one replay: what the ledger tracks
// with room for IDs.
const ReplayLimit = ledger.RequestsLimit / 2

// replayLineMax bounds one line of a recording (a recorded input of up to
// InputLenLimit bytes, escaped, fits).
const replayLineMax = 8 << 20

// replayInputBytesMax bounds the recorded input text one replay holds in
// memory, 1 GiB (what the recorder writes at most by default).
const replayInputBytesMax = 1 << 30

// replayLine is the part of a `batchd serve --record` line a replay reads
// (engine/record.Entry writes it; a test in cmd/batchd checks that the
// two agree). Unknown fields are ignored: the outcome fields are the
// recording's, not the replay's.
type replayLine struct {
	ArrivalS  *float64 `json:"arrival_s"`
	Tenant    string   `json:"tenant"`
	Model     string   `json:"model"`
	Version   string   `json:"version"`
	Params    string   `json:"params"`
	Priority  int8     `json:"priority"`
	TimeoutMs float64  `json:"timeout_ms"`
	InputLen  *int     `json:"input_len"`
	Input     string   `json:"input"`
}

// ErrReplayLine is wrapped by ReadReplay's errors about a line.
var ErrReplayLine = errors.New("bad record")

// ReadReplay reads a recording (JSON Lines, as `batchd serve --record`
// writes them) into requests ordered by arrival, shifted so that the first
// arrives at zero: the recording's idle start says nothing about the
// traffic. Blank lines are skipped. It reads at most limit requests (at
// most ReplayLimit) and fails, naming the line, on a malformed record or
// a file with more.
func ReadReplay(r io.Reader, limit int) ([]ReplayRequest, error) {
	if limit <= 0 || limit > ReplayLimit {
		limit = ReplayLimit
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), replayLineMax)
	var out []ReplayRequest
	line, inputBytes := 0, 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if len(out) >= limit {
			return nil, fmt.Errorf("replay: line %d: more than %d requests", line, limit)
		}
		req, err := parseReplayLine(b)
		if err != nil {
			return nil, fmt.Errorf("replay: line %d: %w: %w", line, ErrReplayLine, err)
		}
		if inputBytes += len(req.Input); inputBytes > replayInputBytesMax {
			return nil, fmt.Errorf("replay: line %d: more than %d bytes of recorded inputs", line, replayInputBytesMax)
		}
		out = append(out, req)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fmt.Errorf("replay: line %d: longer than %d bytes", line+1, replayLineMax)
		}
		return nil, fmt.Errorf("replay: %w", err)
	}
	if len(out) == 0 {
		return nil, errors.New("replay: no requests in the recording")
	}
	// The recorder writes a line when a request ends, so the file is in
	// completion order; the replay needs arrival order (stable, so that
	// equal arrivals keep the file's order).
	slices.SortStableFunc(out, func(a, b ReplayRequest) int {
		switch {
		case a.Arrival < b.Arrival:
			return -1
		case a.Arrival > b.Arrival:
			return 1
		}
		return 0
	})
	first := out[0].Arrival
	for i := range out {
		out[i].Arrival -= first
	}
	return out, nil
}

func parseReplayLine(b []byte) (ReplayRequest, error) {
	var l replayLine
	if err := json.Unmarshal(b, &l); err != nil {
		return ReplayRequest{}, err
	}
	switch {
	case l.ArrivalS == nil:
		return ReplayRequest{}, errors.New("no arrival_s")
	case !(*l.ArrivalS >= 0) || *l.ArrivalS > DurationLimit.Seconds():
		return ReplayRequest{}, fmt.Errorf("arrival_s %v: need 0 to %v", *l.ArrivalS, DurationLimit.Seconds())
	case l.Model == "":
		return ReplayRequest{}, errors.New("no model")
	case l.InputLen == nil:
		return ReplayRequest{}, errors.New("no input_len")
	case *l.InputLen < 0 || *l.InputLen > InputLenLimit:
		return ReplayRequest{}, fmt.Errorf("input_len %d: need 0 to %d", *l.InputLen, InputLenLimit)
	case l.Input != "" && len(l.Input) != *l.InputLen:
		return ReplayRequest{}, fmt.Errorf("input of %d bytes, input_len %d: they must agree", len(l.Input), *l.InputLen)
	case l.Priority < actors.PriorityLow || l.Priority > actors.PriorityHigh:
		return ReplayRequest{}, fmt.Errorf("priority %d: need %d to %d", l.Priority, actors.PriorityLow, actors.PriorityHigh)
	case !(l.TimeoutMs >= 0) || l.TimeoutMs > DurationLimit.Seconds()*1e3:
		return ReplayRequest{}, fmt.Errorf("timeout_ms %v: need 0 to %v", l.TimeoutMs, DurationLimit.Seconds()*1e3)
	}
	return ReplayRequest{
		Arrival:  time.Duration(math.Round(*l.ArrivalS * 1e9)),
		Tenant:   l.Tenant,
		Model:    l.Model,
		Version:  l.Version,
		Params:   l.Params,
		Priority: l.Priority,
		Timeout:  time.Duration(math.Round(l.TimeoutMs * 1e6)),
		// An empty input still costs a batch slot; the simulated device
		// wants at least one byte.
		InputLen: max(*l.InputLen, 1),
		Input:    l.Input,
	}, nil
}

// validateReplay checks the requests of Config.Replay against a run of
// duration d.
func validateReplay(rs []ReplayRequest, d time.Duration) error {
	if len(rs) > ReplayLimit {
		return fmt.Errorf("%d requests: at most %d", len(rs), ReplayLimit)
	}
	for i, r := range rs {
		switch {
		case r.Arrival < 0 || (i > 0 && r.Arrival < rs[i-1].Arrival):
			return fmt.Errorf("request %d: arrival %v: need increasing times from 0", i, r.Arrival)
		case r.Arrival >= d:
			return fmt.Errorf("request %d: arrival %v at or after Duration %v", i, r.Arrival, d)
		case r.Model == "":
			return fmt.Errorf("request %d: no model", i)
		case r.InputLen < 1 || r.InputLen > InputLenLimit:
			return fmt.Errorf("request %d: InputLen %d: need 1 to %d", i, r.InputLen, InputLenLimit)
		case r.Input != "" && len(r.Input) != r.InputLen:
			return fmt.Errorf("request %d: Input of %d bytes, InputLen %d", i, len(r.Input), r.InputLen)
		case r.Timeout < 0:
			return fmt.Errorf("request %d: negative Timeout", i)
		}
	}
	return nil
}

// ReplayDuration is the shortest safety phase that holds every arrival of
// rs: just past the last one.
func ReplayDuration(rs []ReplayRequest) time.Duration {
	if len(rs) == 0 {
		return 0
	}
	return rs[len(rs)-1].Arrival + time.Millisecond
}

// replaySource is the actor that offers Config.Replay: each request at its
// arrival time, IDs 1, 2, ... in arrival order, with the recorded inputs
// or, where none was recorded, inputs of the recorded lengths cut from one
// buffer of random letters.
type replaySource struct {
	reqs    []ReplayRequest
	target  actors.Address
	replyTo actors.Address
	buf     string
	next    int
}

// replayDue is the source's own timer: the next request is due.
type replayDue struct{}

func newReplaySource(reqs []ReplayRequest, target, replyTo actors.Address) *replaySource {
	return &replaySource{reqs: reqs, target: target, replyTo: replyTo}
}

// Offered is the number of requests sent so far.
func (s *replaySource) Offered() int64 { return int64(s.next) }

// Receive implements actors.Actor.
func (s *replaySource) Receive(ctx actors.Context, msg actors.Message) {
	switch msg.(type) {
	case actors.Start:
		longest := 0
		for _, r := range s.reqs {
			longest = max(longest, r.InputLen)
		}
		// Twice the longest input, so that inputs start at random
		// offsets and differ; the letters come from the actor's stream.
		b := make([]byte, 2*longest)
		for i := range b {
			b[i] = 'a' + byte(ctx.Rand().IntN(26))
		}
		s.buf = string(b)
		s.arm(ctx)
	case replayDue:
		now := ctx.Now()
		for s.next < len(s.reqs) && s.reqs[s.next].Arrival <= now {
			s.send(ctx, s.reqs[s.next], now)
		}
		s.arm(ctx)
	}
}

func (s *replaySource) arm(ctx actors.Context) {
	if s.next < len(s.reqs) {
		ctx.After(s.reqs[s.next].Arrival-ctx.Now(), replayDue{})
	}
}

func (s *replaySource) send(ctx actors.Context, r ReplayRequest, now time.Duration) {
	s.next++
	// One draw whatever the input, so recorded inputs do not shift the
	// stream.
	off := ctx.Rand().IntN(len(s.buf) - r.InputLen + 1)
	input := r.Input
	if input == "" {
		input = s.buf[off : off+r.InputLen]
	}
	req := actors.Request{
		ID:       uint64(s.next),
		Tenant:   r.Tenant,
		Model:    r.Model,
		Version:  r.Version,
		Params:   r.Params,
		Priority: r.Priority,
		Input:    input,
		Arrival:  now,
		ReplyTo:  s.replyTo,
	}
	if r.Timeout > 0 {
		req.Deadline = now + r.Timeout
	}
	ctx.Send(s.target, actors.Submit{Req: req})
}

// LoadReplay makes cfg offer exactly the requests recorded at path (a
// `batchd serve --record` file) instead of its sources: its safety phase
// becomes just long enough to hold them (ReplayDuration). A file that
// cannot be opened gives os.Open's error; a bad record, ReadReplay's
// error after the file's path.
func LoadReplay(path string, cfg *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	reqs, err := ReadReplay(f, 0)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	cfg.Replay = reqs
	cfg.Sources = nil
	cfg.Duration = ReplayDuration(reqs)
	return nil
}
