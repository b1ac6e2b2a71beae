package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Decode decodes one JSON value from body into v. strict refuses
// unknown fields: the v1 API is ours, so a misspelt field ("timeout") is a
// client bug worth a 400 rather than a silently ignored setting; the OIP
// routes ignore unknown fields, since its clients send extensions
// ("parameters", "outputs") that batchd has no use for. Text after the
// value is refused. JSON must be UTF-8 (RFC 8259) and encoding/json would
// silently replace invalid bytes with U+FFFD, so the raw body is checked
// first and invalid UTF-8 is refused rather than served altered.
//
// encoding/json also matches keys case-insensitively ("INPUT" fills
// Input) and lets a repeated key overwrite the first: a client that sent
// either meant something the server would not do, so once decoded, the
// keys of every object v's types describe are checked (exactKeys): a
// repeated key, or one that only case-folds to a field's name, is a 400,
// on every route.
func Decode(body []byte, v any, strict bool) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("body is not valid UTF-8")
	}
	t := reflect.TypeOf(v).Elem()
	if decodeFast(body, v, strict) {
		if strict && knownKeys(t).flat {
			return nil // keysKnown checked every key: exact and once
		}
		return exactKeys(body, t)
	}
	// Whatever decodeFast left in v goes: the Decoder starts afresh.
	reflect.ValueOf(v).Elem().SetZero()
	if err := decodeWithDecoder(body, v, strict); err != nil {
		return err
	}
	return exactKeys(body, t)
}

// DecodeReference is what Decode must do, without its fast path: the
// Decoder alone, then the key check. It is slower; the fuzz tests hold
// Decode to it, value for value and word for word.
func DecodeReference(body []byte, v any, strict bool) error {
	if !utf8.Valid(body) {
		return fmt.Errorf("body is not valid UTF-8")
	}
	if err := decodeWithDecoder(body, v, strict); err != nil {
		return err
	}
	return exactKeys(body, reflect.TypeOf(v).Elem())
}

// decodeWithDecoder is Decode's Decoder path: it words every error.
func decodeWithDecoder(body []byte, v any, strict bool) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("empty body")
		}
		return fmt.Errorf("bad JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("bad JSON: more than one value")
	}
	return nil
}

// decodeFast decodes body into v with json.Unmarshal, which needs no
// Decoder: json.NewDecoder and the buffer it copies the body into were
// about 0.85 KB of the 1.1 KB a /v1 infer body cost to decode. When strict,
// it does so only if every top-level key of body is, byte for byte, one of
// v's JSON names and v holds no struct below its top level (see
// knownKeys): Unmarshal then has nothing to ignore.
// It reports false when it cannot tell (an escaped key, a key in another
// case, anything but an object) or Unmarshal fails; Decode then
// decodes with the Decoder, as before, which accepts any body this
// accepts with the same result, and words the errors.
func decodeFast(body []byte, v any, strict bool) bool {
	if strict {
		k := knownKeys(reflect.TypeOf(v).Elem())
		if !k.flat || !keysKnown(body, k.names) {
			return false
		}
	}
	return json.Unmarshal(body, v) == nil
}

// keysKnownMax bounds how many top-level keys keysKnown looks at; a body
// with more is left to the Decoder.
const keysKnownMax = 32

// keysKnown reports whether body is a JSON object whose top-level keys are
// all in known, each once, written without escapes. It reads no further
// than it must, skips values without decoding them, and answers false on
// anything it does not expect: it need not validate, since Unmarshal does
// after it.
func keysKnown(body []byte, known map[string]bool) bool {
	i := SkipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return false
	}
	i = SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return true
	}
	// The keys seen so far, as offsets into body: a repeated key is left
	// to the Decoder path (and exactKeys), which refuses it.
	var seen [keysKnownMax][2]int
	for n := range keysKnownMax {
		if i >= len(body) || body[i] != '"' {
			return false
		}
		end := i + 1
		for end < len(body) && body[end] != '"' && body[end] != '\\' {
			end++
		}
		if end >= len(body) || body[end] != '"' || !known[string(body[i+1:end])] {
			return false
		}
		for _, s := range seen[:n] {
			if string(body[s[0]:s[1]]) == string(body[i+1:end]) {
				return false
			}
		}
		seen[n] = [2]int{i + 1, end}
		i = SkipSpace(body, end+1)
		if i >= len(body) || body[i] != ':' {
			return false
		}
		if i = skipValue(body, SkipSpace(body, i+1)); i < 0 {
			return false
		}
		i = SkipSpace(body, i)
		switch {
		case i >= len(body):
			return false
		case body[i] == '}':
			return true
		case body[i] != ',':
			return false
		}
		i = SkipSpace(body, i+1)
	}
	return false
}

func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index of the delimiter after the JSON value at
// b[i:] (a ',', '}' or ']' outside it), or -1 if there is none. Strings
// are skipped with their escapes, objects and arrays by their nesting.
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i++
			for i < len(b) && b[i] != '"' {
				if b[i] == '\\' {
					i++
				}
				i++
			}
			if i >= len(b) {
				return -1
			}
			i++
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i // the end of the enclosing object
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i
			}
			i++
		default:
			i++
		}
	}
	return -1
}

// keys is what decodeFast knows of a body type.
type keys struct {
	// names are the JSON names of its fields, embedded structs' included,
	// as encoding/json decodes them.
	names map[string]bool
	// flat: no field holds a struct (directly, by pointer, or in a slice,
	// array or map), so a strict Decoder checks the top level's keys only.
	flat bool
}

// knownKeys returns struct type t's keys, cached per type.
func knownKeys(t reflect.Type) keys {
	if k, ok := knownKeysCache.Load(t); ok {
		return k.(keys)
	}
	k := keys{names: map[string]bool{}, flat: true}
	k.add(t)
	knownKeysCache.Store(t, k)
	return k
}

var knownKeysCache sync.Map // reflect.Type → keys

func (k *keys) add(t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			k.add(f.Type)
			continue
		case !f.IsExported():
			continue
		case name != "":
			k.names[name] = true
		default:
			k.names[f.Name] = true
		}
		if holdsStruct(f.Type) {
			k.flat = false
		}
	}
}

func holdsStruct(t reflect.Type) bool {
	for {
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			t = t.Elem()
		case reflect.Struct, reflect.Interface:
			return true
		default:
			return false
		}
	}
}

// schema is what exactKeys knows of a body type: for a struct, its fields
// by exact JSON name, each with the schema of its value (nil: a value not
// checked further, such as a string or the free-form params); for a slice
// or array, its elements'.
type schema struct {
	fields map[string]*schema
	elem   *schema
}

// schemaOf returns t's schema, nil when no object in t's values has keys
// to check. Cached per type.
func schemaOf(t reflect.Type) *schema {
	if s, ok := schemaCache.Load(t); ok {
		return s.(*schema)
	}
	s := buildSchema(t)
	schemaCache.Store(t, s)
	return s
}

var schemaCache sync.Map // reflect.Type → *schema

func buildSchema(t reflect.Type) *schema {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &schema{fields: map[string]*schema{}}
		addFields(s, t)
		return s
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return nil // json.RawMessage: free-form, not ours to check
		}
		if e := buildSchema(t.Elem()); e != nil {
			return &schema{elem: e}
		}
	}
	return nil // strings, numbers, maps, interfaces
}

func addFields(s *schema, t reflect.Type) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-":
			continue
		case f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct:
			addFields(s, f.Type)
			continue
		case !f.IsExported():
			continue
		case name == "":
			name = f.Name
		}
		s.fields[name] = buildSchema(f.Type)
	}
}

// exactKeys checks the keys of body, valid JSON that decoded into a value
// of type t: in every object that decoded into a struct, each key that
// names a field must name it exactly (encoding/json would take "INPUT"
// for "input") and at most once (it would keep the last). A key that
// names no field was refused by a strict decode already, or is an
// extension a lenient one ignores.
func exactKeys(body []byte, t reflect.Type) error {
	s := schemaOf(t)
	if s == nil {
		return nil
	}
	_, err := checkValue(body, SkipSpace(body, 0), s)
	return err
}

// checkValue checks the value at body[i:] against s and returns the index
// just after it. Only the schema's own levels recurse (a few, by the body
// types); what lies below them is skipped by skipValue, without recursion,
// however deep it nests.
func checkValue(body []byte, i int, s *schema) (int, error) {
	if i >= len(body) {
		return i, nil
	}
	switch {
	case s.fields != nil && body[i] == '{':
		return checkObject(body, i, s)
	case s.elem != nil && body[i] == '[':
		i = SkipSpace(body, i+1)
		if i < len(body) && body[i] == ']' {
			return i + 1, nil
		}
		for i < len(body) {
			var err error
			if i, err = checkValue(body, i, s.elem); err != nil {
				return i, err
			}
			i = SkipSpace(body, i)
			if i >= len(body) || body[i] != ',' {
				return i + 1, nil // the ']'
			}
			i = SkipSpace(body, i+1)
		}
		return i, nil
	}
	return skipAny(body, i), nil
}

// checkObject checks the object at body[i:] against s (see exactKeys).
func checkObject(body []byte, i int, s *schema) (int, error) {
	var seen []string // field names met, at most one per field
	i = SkipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return i + 1, nil
	}
	for i < len(body) && body[i] == '"' {
		end := skipString(body, i)
		raw := body[i+1 : end-1]
		key := string(raw)
		if bytes.IndexByte(raw, '\\') >= 0 {
			// encoding/json unescapes keys before it matches them.
			if json.Unmarshal(body[i:end], &key) != nil {
				return end, fmt.Errorf("bad JSON: key %q", truncate(string(raw)))
			}
		}
		i = SkipSpace(body, SkipSpace(body, end)+1) // past the ':'
		child, known := s.fields[key]
		if !known {
			for name := range s.fields {
				if strings.EqualFold(name, key) {
					return i, fmt.Errorf("key %q: keys are case-sensitive; did you mean %q?", truncate(key), name)
				}
			}
		} else {
			if slices.Contains(seen, key) {
				return i, fmt.Errorf("key %q given twice", truncate(key))
			}
			seen = append(seen, key)
		}
		var err error
		if known && child != nil {
			i, err = checkValue(body, i, child)
		} else {
			i = skipAny(body, i)
		}
		if err != nil {
			return i, err
		}
		i = SkipSpace(body, i)
		if i >= len(body) || body[i] != ',' {
			return i + 1, nil // the '}'
		}
		i = SkipSpace(body, i+1)
	}
	return i, nil
}

// skipString returns the index just after the string that starts at
// body[i] (a '"').
func skipString(body []byte, i int) int {
	i++
	for i < len(body) && body[i] != '"' {
		if body[i] == '\\' {
			i++
		}
		i++
	}
	return min(i+1, len(body))
}

// skipAny returns the index just after the value at body[i:]: skipValue's
// delimiter, or the end of the body for a value that ends it.
func skipAny(body []byte, i int) int {
	if j := skipValue(body, i); j >= 0 {
		return j
	}
	return len(body)
}

// truncate shortens client text quoted back in an error message.
func truncate(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
