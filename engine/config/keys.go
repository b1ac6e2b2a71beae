package config

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

var fileType = reflect.TypeOf(File{})

// fieldError is one mistake at one key.
type fieldError struct {
	path string // policy.batch_max, models[0].versions[1].name
	line int    // 0 when unknown
	msg  string
}

// checkKeys walks the YAML tree against the schema type t: every mapping
// key must be a field of the struct it decodes into. It records the line of
// every key it meets under its path in lines, and returns one fieldError
// per unknown key, with the nearest known name as a hint. Types of values
// are left to the decoder.
func checkKeys(n *yaml.Node, t reflect.Type, path string, lines map[string]int) []fieldError {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	var errs []fieldError
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode && t.PkgPath() == fileType.PkgPath():
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
				errs = append(errs, fieldError{p, k.Line, "unknown key" + hint(k.Value, fields)})
				continue
			}
			lines[p] = k.Line
			errs = append(errs, checkKeys(v, ft, p, lines)...)
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
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
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

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// hint suggests the known key nearest to an unknown one, when one is near
// enough to be a typo.
func hint(key string, fields map[string]reflect.Type) string {
	best, bestD := "", 3 // at most two edits away
	names := make([]string, 0, len(fields))
	for k := range fields {
		names = append(names, k)
	}
	sort.Strings(names) // ties go to the first name, not to map order
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

// fieldErrors joins mistakes into one error, each on its own line as
// "file:line: path: message", wrapping ErrInvalid.
func fieldErrors(name string, errs []fieldError) error {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(name)
		if e.line > 0 {
			fmt.Fprintf(&b, ":%d", e.line)
		}
		fmt.Fprintf(&b, ": %s: %s", e.path, e.msg)
	}
	return &Error{msg: b.String()}
}

// Error is a configuration mistake (or several, one per line). It wraps
// ErrInvalid.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }
func (e *Error) Unwrap() error { return ErrInvalid }

// yamlLine matches the "line N: " prefix of the decoder's type errors.
var yamlLine = regexp.MustCompile(`^line (\d+): (.*)$`)

// decodeError turns the decoder's errors into fieldErrors that name the key
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
	var errs []fieldError
	for _, s := range te.Errors {
		fe := fieldError{msg: s}
		if m := yamlLine.FindStringSubmatch(s); m != nil {
			fe.line, _ = strconv.Atoi(m[1])
			fe.msg = m[2]
			fe.path = byLine[fe.line]
		}
		fe.msg = strings.Replace(fe.msg, "into time.Duration", "into a duration (write it with a unit: 100ms, 2s)", 1)
		if fe.path == "" {
			fe.path = "(value)"
		}
		errs = append(errs, fe)
	}
	return fieldErrors(name, errs)
}
