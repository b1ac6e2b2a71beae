package workerproc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The protocol (PROTOCOL.md): frames of a 4-byte big-endian length L and
// then L bytes, the first of which is the message type. Integers are
// big-endian; a byte string is its u32 length and its bytes.
const (
	// ProtocolVersion is the version batchd speaks; a worker answers the
	// handshake with the version it chose from the range batchd offers.
	ProtocolVersion = 1
	// Magic opens both handshake messages, so that a program that is not
	// a batchd worker (or prints to its stdout) is told from one that is.
	Magic = "batchd-worker"

	msgHello      byte = 1 // batchd → worker: the handshake
	msgHelloAck   byte = 2 // worker → batchd: the version chosen
	msgBatch      byte = 3 // batchd → worker: one batch
	msgResult     byte = 4 // worker → batchd: one output or error per input
	msgBatchError byte = 5 // worker → batchd: the whole batch failed

	itemOK    byte = 0
	itemError byte = 1

	// lenPrefix is the size of a frame's length.
	lenPrefix = 4
	// infoMax bounds the free text of a handshake answer that batchd logs.
	infoMax = 1024
)

// errProtocol is wrapped by every error about what the worker wrote: a bad
// frame, an unknown message, a wrong batch id or count. Each is a fault.
var errProtocol = errors.New("worker protocol violation")

func protocolf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errProtocol}, args...)...)
}

// frameReader reads frames of at most max bytes (type included) into a
// buffer of its own, reused from frame to frame: a payload is valid until
// the next call.
type frameReader struct {
	r   io.Reader
	max int
	buf []byte
}

// next reads one frame. A length of 0 or past max is a protocol error,
// refused before anything is allocated for it.
func (fr *frameReader) next() (typ byte, payload []byte, err error) {
	var hdr [lenPrefix]byte
	if _, err := io.ReadFull(fr.r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || uint64(n) > uint64(fr.max) {
		if text(hdr[:]) {
			return 0, nil, protocolf("frame of %d bytes: want 1 to %d (it reads %q: is the worker printing to its stdout, which the protocol owns?)", n, fr.max, hdr[:])
		}
		return 0, nil, protocolf("frame of %d bytes: want 1 to %d", n, fr.max)
	}
	if cap(fr.buf) < int(n) {
		fr.buf = make([]byte, n)
	}
	b := fr.buf[:n]
	if _, err := io.ReadFull(fr.r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return b[0], b[1:], nil
}

// text reports whether b is printable ASCII (a frame's length that is text
// is a print on the worker's stdout).
func text(b []byte) bool {
	for _, c := range b {
		if c < ' ' && c != '\n' && c != '\t' || c > '~' {
			return false
		}
	}
	return true
}

// encoder appends one frame to a buffer that it reuses.
type encoder struct{ b []byte }

// begin starts a frame of type typ, its length to be filled by end.
func (e *encoder) begin(typ byte) {
	e.b = append(e.b[:0], 0, 0, 0, 0, typ)
}

func (e *encoder) u8(v byte)         { e.b = append(e.b, v) }
func (e *encoder) u32(v uint32)      { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64)      { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) bytes(s string)    { e.u32(uint32(len(s))); e.b = append(e.b, s...) }
func (e *encoder) rawBytes(s []byte) { e.u32(uint32(len(s))); e.b = append(e.b, s...) }

// end fills the frame's length and returns it, or an error when it is
// larger than max.
func (e *encoder) end(max int) ([]byte, error) {
	n := len(e.b) - lenPrefix
	if n > max {
		return nil, fmt.Errorf("frame of %d bytes: past frame_max_bytes %d", n, max)
	}
	binary.BigEndian.PutUint32(e.b, uint32(n))
	return e.b, nil
}

// decoder reads a payload's fields; the first short read sets err, and
// every later read returns zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) short(what string) {
	if d.err == nil {
		d.err = protocolf("message ends inside its %s", what)
	}
	d.b = nil
}

func (d *decoder) u8(what string) byte {
	if len(d.b) < 1 {
		d.short(what)
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) u32(what string) uint32 {
	if len(d.b) < 4 {
		d.short(what)
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64(what string) uint64 {
	if len(d.b) < 8 {
		d.short(what)
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

// bytes returns a byte string aliasing the payload.
func (d *decoder) bytes(what string) []byte {
	n := d.u32(what + " length")
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.short(what)
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

// done checks that the payload was read to its end.
func (d *decoder) done(msg string) error {
	if d.err == nil && len(d.b) > 0 {
		d.err = protocolf("%s: %d bytes past its end", msg, len(d.b))
	}
	return d.err
}

// hello is the handshake batchd opens with.
type hello struct {
	VersionMin, VersionMax uint32
	DeviceIndex            uint32
	DeviceName             string
	BatchMax               uint32
	FrameMax               uint32
}

func (e *encoder) hello(h hello) {
	e.begin(msgHello)
	e.bytes(Magic)
	e.u32(h.VersionMin)
	e.u32(h.VersionMax)
	e.u32(h.DeviceIndex)
	e.bytes(h.DeviceName)
	e.u32(h.BatchMax)
	e.u32(h.FrameMax)
}

func decodeHello(p []byte) (hello, error) {
	d := decoder{b: p}
	magic := d.bytes("magic")
	h := hello{VersionMin: d.u32("version_min"), VersionMax: d.u32("version_max"), DeviceIndex: d.u32("device_index")}
	h.DeviceName = string(d.bytes("device_name"))
	h.BatchMax, h.FrameMax = d.u32("batch_max"), d.u32("frame_max")
	if err := d.done("hello"); err != nil {
		return hello{}, err
	}
	if string(magic) != Magic {
		return hello{}, protocolf("hello: magic %q, want %q", magic, Magic)
	}
	return h, nil
}

// helloAck is the worker's answer to hello.
type helloAck struct {
	Version uint32
	// Info is free text about the worker (its language, library, model),
	// logged at start.
	Info string
}

func (e *encoder) helloAck(a helloAck) {
	e.begin(msgHelloAck)
	e.bytes(Magic)
	e.u32(a.Version)
	e.bytes(a.Info)
}

func decodeHelloAck(typ byte, p []byte) (helloAck, error) {
	if typ != msgHelloAck {
		return helloAck{}, protocolf("message type %d where the handshake's answer (%d) was due", typ, msgHelloAck)
	}
	d := decoder{b: p}
	magic := d.bytes("magic")
	a := helloAck{Version: d.u32("version")}
	info := d.bytes("info")
	if err := d.done("hello ack"); err != nil {
		return helloAck{}, err
	}
	if string(magic) != Magic {
		return helloAck{}, protocolf("handshake: magic %q, want %q", magic, Magic)
	}
	if len(info) > infoMax {
		info = info[:infoMax]
	}
	a.Info = string(info)
	return a, nil
}

// batch encodes one batch.
func (e *encoder) batch(id uint64, model, version string, inputs []string) {
	e.begin(msgBatch)
	e.u64(id)
	e.bytes(model)
	e.bytes(version)
	e.u32(uint32(len(inputs)))
	for _, in := range inputs {
		e.bytes(in)
	}
}

// batchMsg is a decoded batch (the worker's side; tests and fuzzing).
type batchMsg struct {
	ID             uint64
	Model, Version string
	Inputs         [][]byte
}

func decodeBatch(p []byte) (batchMsg, error) {
	d := decoder{b: p}
	m := batchMsg{ID: d.u64("batch id")}
	m.Model, m.Version = string(d.bytes("model")), string(d.bytes("version"))
	n := d.u32("count")
	// Each input takes at least its 4-byte length: a count the payload
	// cannot hold is refused before the slice is made.
	if d.err == nil && uint64(n)*4 > uint64(len(d.b)) {
		return batchMsg{}, protocolf("batch: %d inputs in %d bytes", n, len(d.b))
	}
	m.Inputs = make([][]byte, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		m.Inputs = append(m.Inputs, d.bytes("input"))
	}
	if err := d.done("batch"); err != nil {
		return batchMsg{}, err
	}
	return m, nil
}

// itemResult is one item of a result: an output, or an error message.
type itemResult struct {
	Err  bool
	Data []byte
}

func (e *encoder) result(id uint64, items []itemResult) {
	e.begin(msgResult)
	e.u64(id)
	e.u32(uint32(len(items)))
	for _, it := range items {
		if it.Err {
			e.u8(itemError)
		} else {
			e.u8(itemOK)
		}
		e.rawBytes(it.Data)
	}
}

func (e *encoder) batchError(id uint64, msg string) {
	e.begin(msgBatchError)
	e.u64(id)
	e.bytes(msg)
}

// errBatch is a worker's whole-batch error: the batch failed, the worker
// did not, so it is no device fault (the device actor splits the batch to
// find a poison input).
type errBatch struct{ msg string }

func (e *errBatch) Error() string { return "worker: batch failed: " + e.msg }

// decodeReply decodes the worker's answer to batch id of n inputs: the
// outputs and the per-item errors (nil when none failed), or a batch error
// (*errBatch), or a protocol error (a fault).
func decodeReply(typ byte, p []byte, id uint64, n int) ([]string, []error, error) {
	d := decoder{b: p}
	switch typ {
	case msgResult:
	case msgBatchError:
		got := d.u64("batch id")
		msg := d.bytes("message")
		if err := d.done("batch error"); err != nil {
			return nil, nil, err
		}
		if got != id {
			return nil, nil, protocolf("batch error for batch %d, want %d", got, id)
		}
		if len(msg) == 0 {
			msg = []byte("(no message)")
		}
		return nil, nil, &errBatch{msg: string(msg)}
	default:
		return nil, nil, protocolf("message type %d where a result (%d) or batch error (%d) was due", typ, msgResult, msgBatchError)
	}
	got := d.u64("batch id")
	count := d.u32("count")
	if d.err != nil {
		return nil, nil, d.err
	}
	if got != id {
		return nil, nil, protocolf("result for batch %d, want %d", got, id)
	}
	if uint64(count) != uint64(n) {
		return nil, nil, protocolf("result of %d items for a batch of %d", count, n)
	}
	outs := make([]string, n)
	var itemErrs []error
	for i := range n {
		st := d.u8("item status")
		data := d.bytes("item")
		if d.err != nil {
			return nil, nil, d.err
		}
		switch st {
		case itemOK:
			outs[i] = string(data)
		case itemError:
			if itemErrs == nil {
				itemErrs = make([]error, n)
			}
			msg := string(data)
			if msg == "" {
				msg = "(no message)"
			}
			itemErrs[i] = errors.New("worker: " + msg)
		default:
			return nil, nil, protocolf("item %d: status %d, want %d (ok) or %d (error)", i, st, itemOK, itemError)
		}
	}
	if err := d.done("result"); err != nil {
		return nil, nil, err
	}
	return outs, itemErrs, nil
}
