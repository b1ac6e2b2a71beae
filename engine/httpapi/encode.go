package httpapi

import (
	"encoding/json"
	"math"
	"strconv"
)

// appendInferResponse appends r's JSON, byte for byte what encoding/json
// writes for it (FuzzAppendInferResponse checks). The completed infer
// response is written on every request: through json.Encoder it cost
// about 1 µs, reflection and an encoder each time. A function, not a
// method: a method would be promoted to the structs that embed
// *inferResponse, and would write them as their embedded part alone.
func appendInferResponse(b []byte, r *inferResponse) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	b = append(b, `,"output":`...)
	b = appendJSONString(b, r.Output)
	b = append(b, `,"model":`...)
	b = appendJSONString(b, r.Model)
	b = append(b, `,"version":`...)
	b = appendJSONString(b, r.Version)
	b = append(b, `,"latency_ms":`...)
	b = appendJSONFloat(b, r.LatencyMs)
	b = append(b, `,"queue_ms":`...)
	b = appendJSONFloat(b, r.QueueMs)
	b = append(b, `,"compute_ms":`...)
	b = appendJSONFloat(b, r.ComputeMs)
	b = append(b, `,"batch_size":`...)
	b = strconv.AppendInt(b, int64(r.BatchSize), 10)
	b = append(b, `,"attempts":`...)
	b = strconv.AppendInt(b, int64(r.Attempts), 10)
	return append(b, '}')
}

// appendJSONString appends s as encoding/json does. Printable ASCII other
// than the characters it escapes (the quote, the backslash, and <, >, &
// for HTML) is copied; a string with anything else is left to json.Marshal.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil { // a string always encodes: invalid UTF-8 becomes U+FFFD
				panic("httpapi: encoding a string: " + err.Error())
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// appendJSONFloat appends f as encoding/json writes a float64: the
// shortest decimal that reads back as f, in exponent form below 1e-6 and
// from 1e21, with a one-digit negative exponent kept to one digit. f is
// finite (json.Marshal refuses NaN and infinities; these are durations).
func appendJSONFloat(b []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		panic("httpapi: encoding a float that is not finite")
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// e-07 to e-7, as encoding/json does.
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}
