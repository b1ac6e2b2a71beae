package fastlane

import (
	"net/http"
	"net/textproto"
	"strings"
)

// head is a request's line and header fields as the lane serves them.
type head struct {
	method, target string
	host           string
	header         http.Header
	contentLength  int
	close          bool // Connection: close
}

// headStore is a connection's header map and value array, which
// parseHeadInto reuses.
type headStore struct {
	header http.Header
	values []string
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
	return parseHeadInto(b, bodyMax, nil)
}

// parseHeadInto is parseHead with the fields put in hs's header map and
// value array, cleared first, in place of new ones, when hs is not nil: a
// connection's, reused from one request to the next (two of a request's
// allocations). What the handler was given of them is not used once it
// has returned.
func parseHeadInto(b []byte, bodyMax int, hs *headStore) (head, bool) {
	var h head
	// One allocation for the head's text: the method, target and field
	// values are substrings of it.
	s := string(b)
	line, rest, ok := strings.Cut(s, "\r\n")
	if !ok {
		return h, false
	}
	method, line, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(line, " ")
	if !ok1 || !ok2 || proto != "HTTP/1.1" || !token(method) || !plainPath(target) {
		return h, false
	}
	h.method, h.target = method, target
	h.contentLength = -1
	// The fields' values share a backing array (a typical head's in one):
	// a field's own slice is capped at its value, so that a repeated
	// field's append copies.
	var values []string
	if hs != nil {
		if hs.header == nil {
			hs.header = make(http.Header, 8)
		}
		clear(hs.header)
		values, h.header = hs.values[:0], hs.header
		defer func() { hs.values = values[:0] }()
	} else {
		values, h.header = make([]string, 0, 8), make(http.Header, 8)
	}
	hosts := 0
	for n := 0; ; n++ {
		line, rest, ok = strings.Cut(rest, "\r\n")
		if !ok || n > fieldsMax {
			return h, false
		}
		if len(line) == 0 {
			break // the blank line
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !token(name) {
			return h, false // folded (a leading space), or no name
		}
		value = strings.Trim(value, " \t")
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
			h.host = value
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
		if vs := h.header[key]; vs != nil {
			h.header[key] = append(vs, value)
			continue
		}
		values = append(values, value)
		n := len(values)
		h.header[key] = values[n-1 : n : n]
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
func canonical(name string) string {
	for _, k := range commonFields {
		if asciiEqualFold(name, k) {
			return k
		}
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

var commonFields = [...]string{"Host", "Content-Length", "Content-Type", "Authorization", "User-Agent", "Accept", "Connection", "Accept-Encoding", "X-Api-Key"}

// asciiEqualFold is strings.EqualFold of ASCII alone, as net/http
// compares tokens (strings.EqualFold would take "cloſe" for "close").
func asciiEqualFold(b, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
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
func token(b string) bool {
	if len(b) == 0 {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
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
func plainPath(b string) bool {
	if len(b) == 0 || b[0] != '/' {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if c <= ' ' || c >= 0x7f || c == '?' || c == '#' || c == '%' {
			return false
		}
	}
	return true
}

// validHost reports whether b has only the bytes net/http takes in a Host
// (golang.org/x/net/http/httpguts.ValidHostHeader's set).
func validHost(b string) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
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
func fieldValue(b string) bool {
	for i := 0; i < len(b); i++ {
		c := b[i]
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// digits is b as a decimal number of at most max, or -1.
func digits(b string, max int) int {
	if len(b) == 0 || len(b) > 10 {
		return -1
	}
	n := 0
	for i := 0; i < len(b); i++ {
		if c := b[i]; c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(b[i]-'0')
	}
	if n > max {
		return -1
	}
	return n
}
