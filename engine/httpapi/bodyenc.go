package httpapi

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// Compressed request bodies: a POST body may come with Content-Encoding
// gzip (or x-gzip) or deflate, as Triton's and KServe's clients send
// them when asked to compress. The body is bounded twice: as it arrives
// (the route's body limit, on the compressed bytes) and as it
// decompresses (the same limit, on what comes out), so a small body that
// would inflate to gigabytes is refused with 413 once it passes the
// limit, after at most limit+1 bytes of work.

// acceptedEncodings is what a 415 for an unknown Content-Encoding offers
// (its Accept-Encoding header, RFC 7694).
const acceptedEncodings = "gzip, deflate"

// contentEncoding returns a request body's content coding: "" (none, or
// identity), "gzip" or "deflate"; any other, or more than one, is 415.
func contentEncoding(hdr http.Header) (string, *apiError) {
	vals := hdr["Content-Encoding"]
	if len(vals) == 0 {
		return "", nil
	}
	unsupported := func(format string, args ...any) *apiError {
		return &apiError{status: http.StatusUnsupportedMediaType, code: codeMediaType, msg: fmt.Sprintf(format, args...)}
	}
	if len(vals) > 1 {
		return "", unsupported("more than one Content-Encoding; send one of %s", acceptedEncodings)
	}
	switch strings.ToLower(strings.TrimSpace(vals[0])) {
	case "", "identity":
		return "", nil
	case "gzip", "x-gzip":
		return "gzip", nil
	case "deflate":
		return "deflate", nil
	}
	return "", unsupported("Content-Encoding %q: send %s, or none", truncate(vals[0]), acceptedEncodings)
}

// decompressError is a body that does not decompress: a 400.
type decompressError struct {
	enc string
	err error
}

func (e *decompressError) Error() string {
	return "Content-Encoding " + e.enc + ": the body does not decompress: " + e.err.Error()
}

func (e *decompressError) Unwrap() error { return e.err }

// decompress returns a reader of what src, coded as enc ("gzip" or
// "deflate"), decompresses to: at most limit bytes, past which it fails
// with an *http.MaxBytesError. Errors of src itself (its own limit, a read
// timeout) come through as they are; a body that is not what enc says is
// a *decompressError, and so is one with bytes after its end.
func decompress(enc string, src io.Reader, limit int64) io.Reader {
	return &decompressReader{enc: enc, src: src, limit: limit, left: limit}
}

type decompressReader struct {
	enc string
	src io.Reader
	// br is src, buffered, as the decompressors read it: they take it
	// as it is (an io.ByteReader) and read no further than their stream's
	// end, so what is left after it is still in br to be seen.
	br    *bufio.Reader
	dec   io.Reader // made on the first Read: gzip reads its header at once
	limit int64
	left  int64 // bytes it may still return
	err   error // sticky
}

func (d *decompressReader) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if d.dec == nil {
		d.br = bufio.NewReader(d.src)
		dec, err := newDecompressor(d.enc, d.br)
		if err != nil {
			d.err = d.wrap(err)
			return 0, d.err
		}
		d.dec = dec
	}
	if len(p) == 0 {
		return 0, nil
	}
	// One byte more than is left, to tell "exactly the limit" from "past
	// it" (as http.MaxBytesReader does).
	if int64(len(p)) > d.left+1 {
		p = p[:d.left+1]
	}
	n, err := d.dec.Read(p)
	if int64(n) > d.left {
		n = int(d.left)
		d.left = 0
		d.err = &http.MaxBytesError{Limit: d.limit}
		return n, d.err
	}
	d.left -= int64(n)
	switch {
	case err == io.EOF:
		// The coded stream ended: so must the body. (gzip reads on for
		// another member and fails on anything else; zlib and flate stop
		// at their stream's end and would leave the rest unread.)
		if _, serr := d.br.ReadByte(); serr == nil {
			d.err = &decompressError{enc: d.enc, err: errors.New("bytes after the end of the compressed stream")}
		} else if serr != io.EOF {
			d.err = d.wrap(serr)
		} else {
			d.err = io.EOF
		}
	case err != nil:
		d.err = d.wrap(err)
	}
	return n, d.err
}

// wrap words a decompressor's error: the body's own (its limit, a
// timeout) pass through, anything else is the coding's.
func (d *decompressReader) wrap(err error) error {
	var tooBig *http.MaxBytesError
	var netErr net.Error
	if errors.As(err, &tooBig) || errors.As(err, &netErr) {
		return err
	}
	return &decompressError{enc: d.enc, err: err}
}

// newDecompressor reads src as enc. "deflate" is the zlib format (RFC
// 1950), as HTTP defines it and as Python's zlib.compress writes it; a raw
// deflate stream (RFC 1951), which some clients send under the same
// name, is taken too: a zlib stream starts with a header whose two bytes,
// read as a big-endian number, are a multiple of 31 with compression
// method 8.
func newDecompressor(enc string, src *bufio.Reader) (io.Reader, error) {
	if enc == "gzip" {
		return gzip.NewReader(src)
	}
	head, err := src.Peek(2)
	if err != nil && err != io.EOF {
		return nil, err
	}
	if len(head) == 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 {
		return zlib.NewReader(src)
	}
	return flate.NewReader(src), nil
}
