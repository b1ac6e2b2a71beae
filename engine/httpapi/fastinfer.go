package httpapi

import "unicode/utf8"

// fastInferBody decodes the common shape of a /v1 infer body into b
// without reflection: one flat object of the keys input, version,
// priority (strings without escapes), timeout_ms (a positive integer of
// at most 18 digits) and async (true or false), each at most once. It
// answers false, leaving b to be reset, on anything else (params, null,
// escapes, other numbers, unknown or repeated keys, trailing bytes, a body
// that is not UTF-8), which the strict decoder then reads and words the
// errors of. What it accepts, it decodes as that decoder does
// (FuzzDecodeFast holds it to it): encoding/json was 40% of the handler's
// own CPU a request in a profile of `batchd serve` under `batchd load`.
func fastInferBody(body []byte, b *inferBody) bool {
	if !utf8.Valid(body) {
		return false
	}
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return skipSpace(body, i+1) == len(body)
	}
	var seen uint8
	for {
		key, next, ok := fastString(body, i)
		if !ok {
			return false
		}
		i = skipSpace(body, next)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		i = skipSpace(body, i+1)
		var bit uint8
		switch string(key) {
		case "input", "version", "priority":
			s, next, ok := fastString(body, i)
			if !ok {
				return false
			}
			v := string(s)
			switch string(key) {
			case "input":
				bit, b.Input = 1, &v
			case "version":
				bit, b.Version = 2, v
			default:
				bit, b.Priority = 4, v
			}
			i = next
		case "timeout_ms":
			n, next, ok := fastPositive(body, i)
			if !ok {
				return false
			}
			bit, b.TimeoutMs, i = 8, &n, next
		case "async":
			switch {
			case hasAt(body, i, "true"):
				b.Async, i = true, i+4
			case hasAt(body, i, "false"):
				b.Async, i = false, i+5
			default:
				return false
			}
			bit = 16
		default:
			return false
		}
		if seen&bit != 0 {
			return false // repeated: the strict decoder refuses it, in words
		}
		seen |= bit
		i = skipSpace(body, i)
		if i >= len(body) {
			return false
		}
		switch body[i] {
		case ',':
			i = skipSpace(body, i+1)
		case '}':
			return skipSpace(body, i+1) == len(body)
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// fastString reads a JSON string at b[i] that has no escapes and no
// control characters: its contents, and the index after its closing quote.
func fastString(b []byte, i int) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			return b[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

// fastPositive reads a JSON integer at b[i] of 1 to 18 digits with no
// leading zero (so it fits an int64): its value and the index after it. A
// number followed by '.', 'e' or 'E' is not one.
func fastPositive(b []byte, i int) (int64, int, bool) {
	var n int64
	j := i
	for ; j < len(b) && b[j] >= '0' && b[j] <= '9'; j++ {
		n = n*10 + int64(b[j]-'0')
	}
	if j == i || j-i > 18 || b[i] == '0' {
		return 0, 0, false
	}
	if j < len(b) && (b[j] == '.' || b[j] == 'e' || b[j] == 'E') {
		return 0, 0, false
	}
	return n, j, true
}

// hasAt reports whether b holds s at i.
func hasAt(b []byte, i int, s string) bool {
	return len(b)-i >= len(s) && string(b[i:i+len(s)]) == s
}
