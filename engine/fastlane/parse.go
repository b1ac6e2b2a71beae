package fastlane

import (
	"bytes"
	"net/http"
	"net/textproto"
)

// head is a request's line and header fields as the lane serves them.
type head struct {
	method, target string
	host           string
	header         http.Header
	contentLength  int
	close          bool // Connection: close
}

// crlf2 ends a request's head.
var crlf2 = []byte("\r\n\r\n")

// parseHead reads a request head (its line and fields, up to and with the
// blank line) of the plain shape the lane serves, and reports false for
// any other, which net/http then reads and answers as it would have:
// another version than HTTP/1.1; a target that is not a plain absolute
// path (a query, a percent sign, a fragment, a byte outside the visible
// ASCII); a field that is folded, malformed or has a control character
// in its value; no Host, or more than one; a body that is not of one
// declared Content-Length of at most bodyMax bytes; Transfer-Encoding,
// Expect or Upgrade; a Connection other than keep-alive or close; more
// than fieldsMax fields.
func parseHead(b []byte, bodyMax int) (head, bool) {
	var h head
	line, rest, ok := bytes.Cut(b, []byte("\r\n"))
	if !ok {
		return h, false
	}
	method, line, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(line, []byte(" "))
	if !ok1 || !ok2 || string(proto) != "HTTP/1.1" || !token(method) || !plainPath(target) {
		return h, false
	}
	h.method, h.target = string(method), string(target)
	h.contentLength = -1
	h.header = make(http.Header, 8)
	hosts := 0
	for n := 0; ; n++ {
		line, rest, ok = bytes.Cut(rest, []byte("\r\n"))
		if !ok || n > fieldsMax {
			return h, false
		}
		if len(line) == 0 {
			break // the blank line
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !token(name) {
			return h, false // folded (a leading space), or no name
		}
		value = bytes.Trim(value, " \t")
		if !fieldValue(value) {
			return h, false
		}
		key := canonical(name)
		switch key {
		case "Host":
			if !validHost(value) {
				return h, false // net/http's 400
			}
			hosts++
			h.host = string(value)
			continue // as net/http: Request.Host, not a field
		case "Content-Length":
			if h.contentLength >= 0 {
				return h, false
			}
			if h.contentLength = digits(value, bodyMax); h.contentLength < 0 {
				return h, false
			}
		case "Transfer-Encoding", "Expect", "Upgrade", "Te", "Trailer":
			return h, false
		case "Connection":
			switch {
			case asciiEqualFold(value, "close"):
				h.close = true
			case asciiEqualFold(value, "keep-alive"):
			default:
				return h, false
			}
		}
		h.header[key] = append(h.header[key], string(value))
	}
	if hosts != 1 || h.contentLength < 0 {
		return h, false
	}
	return h, true
}

// fieldsMax bounds a head's fields in the lane (net/http takes more).
const fieldsMax = 64

// canonical is a field name's canonical form, without an allocation for
// the names nearly every request has.
func canonical(name []byte) string {
	for _, k := range commonFields {
		if asciiEqualFold(name, k) {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(string(name))
}

var commonFields = [...]string{"Host", "Content-Length", "Content-Type", "Authorization", "User-Agent", "Accept", "Connection", "Accept-Encoding", "X-Api-Key"}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// token reports whether b is a non-empty RFC 9110 token.
func token(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c >= 0x80 || !tokenChar[c] {
			return false
		}
	}
	return true
}

var tokenChar = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// plainPath reports whether b is an absolute path of visible ASCII without
// a query, fragment or percent-encoding.
func plainPath(b []byte) bool {
	if len(b) == 0 || b[0] != '/' {
		return false
	}
	for _, c := range b {
		if c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '%' {
			return false
		}
	}
	return true
}

// validHost reports whether b has only the bytes net/http takes in a Host
// (golang.org/x/net/http/httpguts.ValidHostHeader's set).
func validHost(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 || !hostChar[c] {
			return false
		}
	}
	return true
}

var hostChar = func() (t [128]bool) {
	for c := range tokenChar {
		t[c] = tokenChar[c] && c != '#' && c != '^' && c != '`' && c != '|'
	}
	for _, c := range "!$%&'()*+,-.:;=[]_~" {
		t[c] = true
	}
	return t
}()

// fieldValue reports whether a trimmed field value has no control
// character but tab.
func fieldValue(b []byte) bool {
	for _, c := range b {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// digits is b as a decimal number of at most max, or -1.
func digits(b []byte, max int) int {
	if len(b) == 0 || len(b) > 10 {
		return -1
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	if n > max {
		return -1
	}
	return n
}
