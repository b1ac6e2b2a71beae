// Package strictjson decodes a request body the way the HTTP API must:
// one JSON value, valid UTF-8, keys matched exactly and at most once in
// every object the target type describes (encoding/json would match
// "INPUT" to "input" and keep the last of a repeated key), unknown fields
// refused when strict, with a fast path (json.Unmarshal, no Decoder) for
// the common flat body. Its errors are the text of a 400.
//
// Imported by: engine/httpapi. It imports nothing of batchd.
package strictjson
