package workerproc

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

// binaryInputs holds every byte value, an empty input and a newline: the
// protocol carries bytes, not text.
func binaryInputs() []string {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	return []string{string(all), "", "line\nbreak", "\x00\x00\x00\x05\x04"}
}

// TestFrameRoundTrip: each message decodes to what was encoded, through a
// frameReader over the bytes.
func TestFrameRoundTrip(t *testing.T) {
	var e encoder
	var stream bytes.Buffer
	frame := func() {
		b, err := e.end(1 << 20)
		if err != nil {
			t.Fatal(err)
		}
		stream.Write(b)
	}
	h := hello{VersionMin: 1, VersionMax: 1, DeviceIndex: 7, DeviceName: "worker-7", BatchMax: 100, FrameMax: 1 << 20}
	e.hello(h)
	frame()
	e.helloAck(helloAck{Version: 1, Info: "info"})
	frame()
	in := binaryInputs()
	e.batch(42, "model", "v1", in)
	frame()
	items := []itemResult{{Data: []byte(in[0])}, {Err: true, Data: []byte("bad")}, {Data: nil}, {Data: []byte(in[3])}}
	e.result(42, items)
	frame()
	e.batchError(43, "poison")
	frame()

	fr := frameReader{r: &stream, max: 1 << 20}
	typ, p, err := fr.next()
	if err != nil || typ != msgHello {
		t.Fatalf("hello: %d %v", typ, err)
	}
	if got, err := decodeHello(p); err != nil || got != h {
		t.Errorf("hello %+v, %v; want %+v", got, err, h)
	}
	typ, p, _ = fr.next()
	if a, err := decodeHelloAck(typ, p); err != nil || a.Version != 1 || a.Info != "info" {
		t.Errorf("ack %+v %v", a, err)
	}
	typ, p, _ = fr.next()
	m, err := decodeBatch(p)
	if typ != msgBatch || err != nil || m.ID != 42 || m.Model != "model" || m.Version != "v1" || len(m.Inputs) != len(in) {
		t.Fatalf("batch %d %+v %v", typ, m, err)
	}
	for i := range in {
		if string(m.Inputs[i]) != in[i] {
			t.Errorf("input %d: %q, want %q", i, m.Inputs[i], in[i])
		}
	}
	typ, p, _ = fr.next()
	outs, itemErrs, err := decodeReply(typ, p, 42, 4)
	if err != nil || !slices.Equal(outs, []string{in[0], "", "", in[3]}) || itemErrs == nil || itemErrs[1] == nil ||
		!strings.Contains(itemErrs[1].Error(), "bad") || itemErrs[0] != nil || itemErrs[2] != nil {
		t.Errorf("result %q %v %v", outs, itemErrs, err)
	}
	typ, p, _ = fr.next()
	var be *errBatch
	if _, _, err := decodeReply(typ, p, 43, 4); !errors.As(err, &be) || be.msg != "poison" {
		t.Errorf("batch error: %v", err)
	}
	if _, _, err := fr.next(); err != io.EOF {
		t.Errorf("after the last frame: %v, want EOF", err)
	}
}

// TestReplyChecks: a reply for another batch, of another count, of an
// unknown type or status, with bytes past its end or cut short, is a
// protocol error; so is a frame longer than max, refused from its length
// alone, and an empty frame.
func TestReplyChecks(t *testing.T) {
	var e encoder
	build := func(f func()) (byte, []byte) {
		f()
		b, _ := e.end(1 << 20)
		return b[4], slices.Clone(b[5:])
	}
	ok := []itemResult{{Data: []byte("a")}, {Data: []byte("b")}}
	typ, p := build(func() { e.result(7, ok) })
	if _, _, err := decodeReply(typ, p, 7, 2); err != nil {
		t.Fatalf("the good reply: %v", err)
	}
	for name, c := range map[string]func() (byte, []byte){
		"wrong id":    func() (byte, []byte) { return build(func() { e.result(8, ok) }) },
		"wrong count": func() (byte, []byte) { return build(func() { e.result(7, ok[:1]) }) },
		"error id":    func() (byte, []byte) { return build(func() { e.batchError(8, "x") }) },
		"type":        func() (byte, []byte) { return build(func() { e.batch(7, "m", "v", []string{"a", "b"}) }) },
		"trailing": func() (byte, []byte) {
			typ, p := build(func() { e.result(7, ok) })
			return typ, append(p, 0)
		},
		"status": func() (byte, []byte) {
			typ, p := build(func() { e.result(7, ok) })
			p[12] = 9 // the first item's status
			return typ, p
		},
		"short": func() (byte, []byte) {
			typ, p := build(func() { e.result(7, ok) })
			return typ, p[:len(p)-1]
		},
	} {
		typ, p := c()
		if _, _, err := decodeReply(typ, p, 7, 2); !errors.Is(err, errProtocol) {
			t.Errorf("%s: %v, want a protocol error", name, err)
		}
	}
	fr := frameReader{r: strings.NewReader("\x00\x10\x00\x00"), max: 4096}
	if _, _, err := fr.next(); !errors.Is(err, errProtocol) || cap(fr.buf) != 0 {
		t.Errorf("a 1 MiB frame past a 4 KiB max: %v, buffer %d", err, cap(fr.buf))
	}
	fr = frameReader{r: strings.NewReader("\x00\x00\x00\x00"), max: 4096}
	if _, _, err := fr.next(); !errors.Is(err, errProtocol) {
		t.Errorf("an empty frame: %v", err)
	}
}

// FuzzReadReply: whatever a worker writes, reading it as frames and
// decoding them as answers to a batch never panics, never buffers past the
// frame limit, and what decodes as a result has one output per input and
// encodes back to the same bytes.
func FuzzReadReply(f *testing.F) {
	var e encoder
	add := func(n int) {
		b, _ := e.end(1 << 16)
		f.Add(slices.Clone(b), n)
	}
	e.result(1, []itemResult{{Data: []byte("x")}, {Err: true, Data: []byte("e")}, {}})
	add(3)
	e.batchError(1, "boom")
	add(3)
	e.helloAck(helloAck{Version: 1})
	add(1)
	f.Add([]byte("this is not a frame\n"), 1)
	f.Add([]byte{0, 0, 0, 1, msgResult}, 1)
	f.Fuzz(func(t *testing.T, data []byte, n int) {
		n = 1 + (n%200+200)%200
		fr := frameReader{r: bytes.NewReader(data), max: 1 << 16}
		for range 4 {
			typ, p, err := fr.next()
			if err != nil {
				return
			}
			if len(p)+1 > fr.max || cap(fr.buf) > fr.max {
				t.Fatalf("frame of %d bytes past the max %d", len(p)+1, fr.max)
			}
			outs, itemErrs, err := decodeReply(typ, p, 1, n)
			if err != nil {
				continue
			}
			if len(outs) != n || itemErrs != nil && len(itemErrs) != n {
				t.Fatalf("%d outputs, %d errors for %d inputs", len(outs), len(itemErrs), n)
			}
			items := make([]itemResult, n)
			empty := false
			for i := range n {
				items[i] = itemResult{Data: []byte(outs[i])}
				if itemErrs != nil && itemErrs[i] != nil {
					msg := strings.TrimPrefix(itemErrs[i].Error(), "worker: ")
					empty = empty || msg == "(no message)"
					items[i] = itemResult{Err: true, Data: []byte(msg)}
				}
			}
			var back encoder
			back.result(1, items)
			// An error item of no message reads as "(no message)".
			if b, _ := back.end(1 << 20); !empty && !bytes.Equal(b[5:], p) {
				t.Fatalf("re-encoded %x, read %x", b[5:], p)
			}
		}
	})
}
