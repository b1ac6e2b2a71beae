package upstream

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/batchd/batchd/engine"
)

// OIPConfig is an upstream Open Inference Protocol server and its slots.
type OIPConfig struct {
	Conn
	// Slots is the number of devices (batches in flight at once) on it.
	Slots int
	// Timeout bounds one batch's call, from sending it to the last byte
	// of the answer; past it the batch is a device fault.
	Timeout time.Duration
	// ReadyTimeout bounds the wait, at start, for the upstream's
	// /v2/health/ready to answer 200.
	ReadyTimeout time.Duration
	// InputName and OutputName are the tensors' names ("input" and
	// "output", as batchd's own /v2 names them).
	InputName  string
	OutputName string
	// BinaryData sends the input and asks for the output as binary tensor
	// data (the extension Triton and batchd speak): any bytes go through.
	// Without it both are JSON, which KServe and MLServer speak, and an
	// input that is not UTF-8 fails alone.
	BinaryData bool
	// BatchMax is the most inputs of one batch.
	BatchMax int
	// ResponseMaxBytes bounds an answer's body.
	ResponseMaxBytes int64
}

// DefaultOIPConfig returns the defaults of every field but URL, Token and
// CAFile.
func DefaultOIPConfig() OIPConfig {
	return OIPConfig{
		Conn:             Conn{ConnsMax: 4, DialTimeout: 5 * time.Second},
		Slots:            4,
		Timeout:          10 * time.Second,
		ReadyTimeout:     30 * time.Second,
		InputName:        "input",
		OutputName:       "output",
		BinaryData:       true,
		BatchMax:         100,
		ResponseMaxBytes: 64 << 20,
	}
}

// Validate reports the first field that makes the configuration unusable
// (the URL and CA file are checked by NewOIP).
func (c OIPConfig) Validate() error {
	switch {
	case c.URL == "":
		return errors.New("upstream config: URL is missing")
	case c.Slots < 1:
		return fmt.Errorf("upstream config: Slots %d: must be at least 1", c.Slots)
	case c.Timeout <= 0 || c.ReadyTimeout <= 0:
		return errors.New("upstream config: Timeout and ReadyTimeout must be positive")
	case c.InputName == "" || c.OutputName == "":
		return errors.New("upstream config: InputName and OutputName must not be empty")
	case c.BatchMax < 1:
		return fmt.Errorf("upstream config: BatchMax %d: must be at least 1", c.BatchMax)
	case c.ResponseMaxBytes < 1:
		return fmt.Errorf("upstream config: ResponseMaxBytes %d: must be at least 1", c.ResponseMaxBytes)
	}
	return nil
}

// OIP is one upstream: its connection pool, and its slots (Slot).
type OIP struct {
	cfg    OIPConfig
	base   string // URL without its trailing slash
	tr     *http.Transport
	client *http.Client

	batches, faults atomic.Int64
}

// NewOIP returns the upstream of cfg; nothing is dialled until Ready or
// the first batch.
func NewOIP(cfg OIPConfig) (*OIP, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.ConnsMax = max(cfg.ConnsMax, cfg.Slots)
	tr, err := newTransport(cfg.Conn)
	if err != nil {
		return nil, fmt.Errorf("upstream config: %w", err)
	}
	return &OIP{cfg: cfg, base: strings.TrimRight(cfg.URL, "/"), tr: tr, client: &http.Client{Transport: tr}}, nil
}

// Batches is the number of batches sent; Faults the number that were
// device faults.
func (u *OIP) Batches() int64 { return u.batches.Load() }
func (u *OIP) Faults() int64  { return u.faults.Load() }

// Close drops the pool's idle connections.
func (u *OIP) Close() { u.tr.CloseIdleConnections() }

// Ready waits, within ctx and ReadyTimeout, for GET {base}/v2/health/ready
// to answer 200, asking every 250 ms; the error says what the last try
// saw (a refused connection, a status, a TLS error).
func (u *OIP) Ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, u.cfg.ReadyTimeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		err := u.readyOnce(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("upstream %s not ready within %v: %w", u.base, u.cfg.ReadyTimeout, err)
		case <-tick.C:
		}
	}
}

func (u *OIP) readyOnce(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.base+"/v2/health/ready", nil)
	if err != nil {
		return err
	}
	u.auth(req)
	resp, err := u.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := readBounded(resp.Body, 4096)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /v2/health/ready: %s %s", resp.Status, snippet(body))
	}
	return nil
}

func (u *OIP) auth(req *http.Request) {
	if u.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+u.cfg.Token)
	}
}

// Slot returns device i's backend on the upstream.
func (u *OIP) Slot(i int) *Slot {
	return &Slot{u: u, name: "upstream-" + strconv.Itoa(i)}
}

// Slot is one device on an upstream (engine.Backend): one batch at a time.
type Slot struct {
	u       *OIP
	name    string
	running atomic.Int32
}

var _ engine.Backend = (*Slot)(nil)

// Run implements engine.Backend: one infer call for the batch.
func (s *Slot) Run(ctx context.Context, model, version string, inputs []string) ([]string, []error, error) {
	if s.running.Add(1) != 1 {
		s.running.Add(-1)
		panic("batchd: upstream backend: two batches at once on one device")
	}
	defer s.running.Add(-1)
	u := s.u
	n := len(inputs)
	if n < 1 || n > u.cfg.BatchMax {
		return nil, nil, fmt.Errorf("%s: %d inputs, want 1 to %d: %w", s.name, n, u.cfg.BatchMax, engine.ErrBatchSize)
	}
	u.batches.Add(1)
	// Without binary data, an input JSON cannot carry fails alone.
	send, itemErrs := inputs, []error(nil)
	var at []int // at[j]: the batch index of send[j], when some were left out
	if !u.cfg.BinaryData {
		send, at, itemErrs = utf8Only(inputs)
		if len(send) == 0 {
			return nil, itemErrs, nil
		}
	}
	outs, err := s.call(ctx, model, version, send)
	if err != nil {
		if errors.Is(err, engine.ErrDeviceFault) {
			u.faults.Add(1)
		}
		return nil, nil, fmt.Errorf("%s: %w", s.name, err)
	}
	if at == nil {
		return outs, nil, nil
	}
	all := make([]string, n)
	for j, i := range at {
		all[i] = outs[j]
	}
	return all, itemErrs, nil
}

// utf8Only returns the inputs JSON can carry, their indices, and an error
// for each of the others.
func utf8Only(inputs []string) (send []string, at []int, itemErrs []error) {
	for i, in := range inputs {
		if utf8.ValidString(in) {
			continue
		}
		if itemErrs == nil {
			itemErrs = make([]error, len(inputs))
		}
		itemErrs[i] = errors.New("input is not UTF-8: the upstream is spoken to in JSON (set binary_data: true if it takes binary tensor data)")
	}
	if itemErrs == nil {
		return inputs, nil, nil
	}
	for i, in := range inputs {
		if itemErrs[i] == nil {
			send = append(send, in)
			at = append(at, i)
		}
	}
	return send, at, itemErrs
}

// call sends one infer request and returns its n outputs. Its error wraps
// engine.ErrDeviceFault when the upstream, not the batch, failed.
func (s *Slot) call(ctx context.Context, model, version string, inputs []string) ([]string, error) {
	u := s.u
	path := u.base + "/v2/models/" + url.PathEscape(model)
	if version != "" {
		path += "/versions/" + url.PathEscape(version)
	}
	path += "/infer"
	body, headerLen, err := encodeInfer(u.cfg, inputs)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, u.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	u.auth(req)
	replayable(req)
	if headerLen > 0 {
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set(headerInferLen, strconv.Itoa(headerLen))
	} else {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := u.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w: %w", path, engine.ErrDeviceFault, err)
	}
	defer resp.Body.Close()
	rb, err := readBounded(resp.Body, u.cfg.ResponseMaxBytes)
	if err != nil {
		if ctx.Err() != nil || !strings.Contains(err.Error(), "response_max_bytes") {
			// Cut off mid-answer: the connection or the time, not the batch.
			return nil, fmt.Errorf("POST %s: reading the answer: %w: %w", path, engine.ErrDeviceFault, err)
		}
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
		// The upstream failed or is saturated: another slot (after this
		// one's backoff) may fare better.
		return nil, fmt.Errorf("POST %s: %s: %w: %s", path, resp.Status, engine.ErrDeviceFault, oipError(rb))
	default:
		return nil, fmt.Errorf("POST %s: %s: %s", path, resp.Status, oipError(rb))
	}
	outs, err := decodeInferResponse(resp.Header, rb, u.cfg.OutputName, len(inputs))
	if err != nil {
		return nil, fmt.Errorf("POST %s: the answer: %w", path, err)
	}
	return outs, nil
}

// headerInferLen is the binary tensor data extension's header: the length
// of the JSON that begins a body which binary data follows.
const headerInferLen = "Inference-Header-Content-Length"

type inferTensor struct {
	Name       string         `json:"name"`
	Datatype   string         `json:"datatype"`
	Shape      []int64        `json:"shape"`
	Parameters map[string]any `json:"parameters,omitempty"`
	Data       []string       `json:"data,omitempty"`
}

type inferOutput struct {
	Name       string         `json:"name"`
	Parameters map[string]any `json:"parameters,omitempty"`
}

type inferRequest struct {
	Inputs  []inferTensor `json:"inputs"`
	Outputs []inferOutput `json:"outputs"`
}

// encodeInfer returns the infer request's body and, with binary data, the
// length of its JSON header (0 without).
func encodeInfer(cfg OIPConfig, inputs []string) ([]byte, int, error) {
	in := inferTensor{Name: cfg.InputName, Datatype: "BYTES", Shape: []int64{int64(len(inputs))}}
	out := inferOutput{Name: cfg.OutputName}
	size := 0
	if cfg.BinaryData {
		for _, s := range inputs {
			size += 4 + len(s)
		}
		in.Parameters = map[string]any{"binary_data_size": size}
		out.Parameters = map[string]any{"binary_data": true}
	} else {
		in.Data = inputs
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(inferRequest{Inputs: []inferTensor{in}, Outputs: []inferOutput{out}}); err != nil {
		return nil, 0, fmt.Errorf("encoding the request: %w", err)
	}
	buf.Truncate(buf.Len() - 1) // the Encoder's newline
	if !cfg.BinaryData {
		return buf.Bytes(), 0, nil
	}
	headerLen := buf.Len()
	buf.Grow(size)
	for _, s := range inputs {
		buf.Write(binary.LittleEndian.AppendUint32(buf.AvailableBuffer(), uint32(len(s))))
		buf.WriteString(s)
	}
	return buf.Bytes(), headerLen, nil
}

type inferResponse struct {
	Outputs []struct {
		Name       string  `json:"name"`
		Datatype   string  `json:"datatype"`
		Shape      []int64 `json:"shape"`
		Parameters struct {
			BinaryDataSize *int64 `json:"binary_data_size"`
		} `json:"parameters"`
		Data []json.RawMessage `json:"data"`
	} `json:"outputs"`
}

// decodeInferResponse returns the n elements of the output tensor named
// name, from JSON data or binary tensor data; any other shape, count or
// type is an error.
func decodeInferResponse(hdr http.Header, body []byte, name string, n int) ([]string, error) {
	header, bin := body, []byte(nil)
	if v := hdr.Get(headerInferLen); v != "" {
		hl, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || hl < 1 || hl > len(body) {
			return nil, fmt.Errorf("%s %q: want 1 to %d", headerInferLen, v, len(body))
		}
		header, bin = body[:hl], body[hl:]
	}
	var r inferResponse
	if err := json.Unmarshal(header, &r); err != nil {
		return nil, fmt.Errorf("not an infer response: %w", err)
	}
	found := -1
	offset := 0 // where this output's binary data begins: outputs' data come in order
	for i, o := range r.Outputs {
		if o.Name == name {
			found = i
			break
		}
		if o.Parameters.BinaryDataSize != nil {
			offset += int(*o.Parameters.BinaryDataSize)
		}
	}
	if found < 0 {
		return nil, fmt.Errorf("no output named %q", name)
	}
	o := r.Outputs[found]
	if o.Datatype != "BYTES" {
		return nil, fmt.Errorf("output %q: datatype %q, want BYTES", name, o.Datatype)
	}
	if !shapeIs(o.Shape, n) {
		return nil, fmt.Errorf("output %q: shape %v for %d inputs, want [%d]", name, o.Shape, n, n)
	}
	outs := make([]string, 0, n)
	if sz := o.Parameters.BinaryDataSize; sz != nil {
		if *sz < 0 || offset < 0 || int64(offset)+*sz > int64(len(bin)) {
			return nil, fmt.Errorf("output %q: binary_data_size %d past the %d bytes of binary data", name, *sz, len(bin))
		}
		b := bin[offset : offset+int(*sz)]
		for len(b) > 0 {
			if len(b) < 4 {
				return nil, fmt.Errorf("output %q: a truncated element length", name)
			}
			l := binary.LittleEndian.Uint32(b)
			b = b[4:]
			if uint64(l) > uint64(len(b)) {
				return nil, fmt.Errorf("output %q: an element of %d bytes past the data's end", name, l)
			}
			outs = append(outs, string(b[:l]))
			b = b[l:]
		}
	} else {
		for i, raw := range o.Data {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, fmt.Errorf("output %q: data[%d]: want a string: %w", name, i, err)
			}
			outs = append(outs, s)
		}
	}
	if len(outs) != n {
		return nil, fmt.Errorf("output %q: %d elements for %d inputs", name, len(outs), n)
	}
	return outs, nil
}

// shapeIs reports whether shape is [n] (or [n, 1], a column).
func shapeIs(shape []int64, n int) bool {
	switch len(shape) {
	case 1:
		return shape[0] == int64(n)
	case 2:
		return shape[0] == int64(n) && shape[1] == 1
	}
	return false
}

// oipError is the message of an OIP error body ({"error": "..."}), or the
// body's start.
func oipError(body []byte) string {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return snippet([]byte(e.Error))
	}
	return snippet(body)
}
