package schema

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ErrInvalid is wrapped by every error about a file's content (as opposed
// to reading it), so a caller can tell a bad file from a missing one.
var ErrInvalid = errors.New("invalid configuration")

// FieldError is one mistake at one key.
type FieldError struct {
	// Where the value came from: "file.yaml:12", a flag ("--devices"),
	// "(default)", or the file's name alone when the line is unknown.
	Where string
	// Line is the line of the key in the file, 0 when unknown; mistakes
	// are reported in line order.
	Line int
	// Path is the key's path: policy.batch_max, traffic[1].rate.
	Path string
	Msg  string
}

// Error is a file's mistakes, one a line, each as "where: path: message".
// It wraps ErrInvalid.
type Error struct {
	Fields []FieldError
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteByte('\n')
		}
		for _, s := range []string{f.Where, f.Path} {
			if s != "" {
				b.WriteString(s)
				b.WriteString(": ")
			}
		}
		b.WriteString(f.Msg)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Invalid is an Error of one message with no key of its own: an owner's
// check (actors.BatcherConfig.Validate) that the schema let through.
func Invalid(where, msg string) *Error {
	return &Error{Fields: []FieldError{{Where: where, Msg: msg}}}
}

// Decode decodes the YAML document data (named name in errors) into out, a
// pointer to a struct holding the defaults, strictly: every key must be a
// field of the struct it decodes into, and every value must fit its field.
// It returns the line of every key and sequence item it read, by path
// (models[0].versions[1].name), for errors about values (Validator). An
// empty document, or one of only comments or "---", leaves out as it is.
func Decode(name string, data []byte, out any) (map[string]int, error) {
	t := reflect.TypeOf(out)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("schema: decode into %T: want a pointer to a struct", out)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
	}
	lines := map[string]int{}
	if len(root.Content) == 0 || root.Content[0].Tag == "!!null" {
		return lines, nil
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: %w: the file must be a mapping of keys (%s)", name, doc.Line, ErrInvalid,
			strings.Join(sortedNames(yamlFields(t.Elem())), ", "))
	}
	if errs := checkKeys(doc, t.Elem(), "", lines); len(errs) > 0 {
		return nil, located(name, errs)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil {
		return nil, decodeError(name, err, lines)
	}
	return lines, nil
}

// Sources turns Decode's lines into "name:line" by path, the form
// Validator quotes.
func Sources(name string, lines map[string]int) map[string]string {
	src := make(map[string]string, len(lines))
	for p, l := range lines {
		src[p] = name + ":" + strconv.Itoa(l)
	}
	return src
}

// located names each mistake's file and line and joins them into an Error.
func located(name string, errs []FieldError) *Error {
	for i := range errs {
		errs[i].Where = name
		if errs[i].Line > 0 {
			errs[i].Where += ":" + strconv.Itoa(errs[i].Line)
		}
	}
	slices.SortStableFunc(errs, func(a, b FieldError) int { return a.Line - b.Line })
	return &Error{Fields: errs}
}

// isSchema reports a struct the loader walks into: one with a field tagged
// for YAML (not time.Time or another value decoded whole).
func isSchema(t reflect.Type) bool {
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		if _, ok := t.Field(i).Tag.Lookup("yaml"); ok {
			return true
		}
	}
	return false
}

// checkKeys walks the YAML tree against the schema type t: every mapping
// key must be a field of the struct it decodes into. It records the line of
// every key and item it meets under its path in lines, and returns one
// FieldError per unknown key, with the nearest known name as a hint. Types
// of values are left to the decoder.
func checkKeys(n *yaml.Node, t reflect.Type, path string, lines map[string]int) []FieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	var errs []FieldError
	switch {
	case isSchema(t) && n.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				if k.Value == "<<" { // a merge key: check what it merges
					errs = append(errs, checkKeys(v, t, path, lines)...)
					continue
				}
				errs = append(errs, FieldError{Line: k.Line, Path: p, Msg: "unknown key" + hint(k.Value, fields)})
				continue
			}
			lines[p] = k.Line
			errs = append(errs, checkKeys(v, ft, p, lines)...)
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			lines[p] = k.Line
			errs = append(errs, checkKeys(v, t.Elem(), p, lines)...)
		}
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			lines[p] = e.Line
			errs = append(errs, checkKeys(e, t.Elem(), p, lines)...)
		}
	}
	return errs
}

// yamlFields maps a struct's YAML keys to their field types, inlined
// structs included.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if strings.Contains(opts, "inline") {
			for k, v := range yamlFields(f.Type) {
				m[k] = v
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		m[name] = f.Type
	}
	return m
}

// Keys returns every YAML key of the schema type t and of the schema types
// under it, sorted: what a reference file must mention.
func Keys(t reflect.Type) []string {
	seen := map[string]bool{}
	var walk func(reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if !isSchema(t) {
			return
		}
		for k, ft := range yamlFields(t) {
			if !seen[k] {
				seen[k] = true
				walk(ft)
			}
		}
	}
	walk(t)
	return sortedNames(seen)
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// hint suggests the known key nearest to an unknown one, when one is near
// enough to be a typo, or lists the known keys.
func hint(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 3         // at most two edits away
	names := sortedNames(fields) // ties go to the first name, not to map order
	for _, k := range names {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return " (known: " + strings.Join(names, ", ") + ")"
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of two short keys.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// decoderLine matches the "line N: " prefix of the decoder's type errors.
var decoderLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// decodeError turns the decoder's errors into FieldErrors that name the key
// at the line the decoder gives, and says how to write a duration.
func decodeError(name string, err error, lines map[string]int) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
	}
	byLine := map[int]string{}
	for p, l := range lines {
		// The deepest key on a line is the one its value belongs to.
		if q, ok := byLine[l]; !ok || len(p) > len(q) || (len(p) == len(q) && p < q) {
			byLine[l] = p
		}
	}
	var errs []FieldError
	for _, s := range te.Errors {
		fe := FieldError{Path: "(value)", Msg: s}
		if m := decoderLine.FindStringSubmatch(s); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Msg = m[2]
			if p, ok := byLine[fe.Line]; ok {
				fe.Path = p
			}
		}
		fe.Msg = strings.Replace(fe.Msg, "into time.Duration", "into a duration (write it with a unit: 100ms, 2s)", 1)
		errs = append(errs, fe)
	}
	return located(name, errs)
}
