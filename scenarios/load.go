package scenarios

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// builtin holds the scenario files of this folder and their profiles.
//
//go:embed *.yaml profiles
var builtin embed.FS

// Bounds on what the loader reads, so a wrong path (a log file, a
// device) is an error rather than memory spent.
const (
	// FileBytesMax bounds a scenario file.
	FileBytesMax = 1 << 20
	// ProfileBytesMax bounds a latency profile.
	ProfileBytesMax = 1 << 20
)

var (
	// ErrInvalid is wrapped by every error about a scenario's content, as
	// opposed to reading it.
	ErrInvalid = errors.New("invalid scenario")
	// ErrUnknown is wrapped by Find for a name that is neither a file nor
	// a built-in scenario.
	ErrUnknown = errors.New("unknown scenario")
)

// Error is a scenario's mistakes, one a line, each as "file:line: path:
// message". It wraps ErrInvalid.
type Error struct {
	File   string
	Fields []FieldError
}

// FieldError is one mistake at one key.
type FieldError struct {
	// Line is the line of the key, 0 when unknown.
	Line int
	// Path is the key's path: traffic[1].rate, expect[0].
	Path string
	Msg  string
}

func (e *Error) Error() string {
	var b strings.Builder
	for i, f := range e.Fields {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.File)
		if f.Line > 0 {
			fmt.Fprintf(&b, ":%d", f.Line)
		}
		fmt.Fprintf(&b, ": %s: %s", f.Path, f.Msg)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return ErrInvalid }

// Builtins returns the names of the built-in scenarios, sorted.
func Builtins() []string {
	entries, err := fs.ReadDir(builtin, ".")
	if err != nil {
		panic("scenarios: embedded files: " + err.Error())
	}
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".yaml"); ok && !e.IsDir() {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// Builtin loads the built-in scenario called name (its file is
// name.yaml in this folder).
func Builtin(name string) (*Scenario, error) {
	file := name + ".yaml"
	if !fs.ValidPath(file) || strings.Contains(name, "/") {
		return nil, fmt.Errorf("scenario %q: %w (built-in: %s)", name, ErrUnknown, strings.Join(Builtins(), ", "))
	}
	data, err := fs.ReadFile(builtin, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("scenario %q: %w (built-in: %s)", name, ErrUnknown, strings.Join(Builtins(), ", "))
	}
	if err != nil {
		return nil, fmt.Errorf("scenario %q: %w", name, err)
	}
	return Parse("scenarios/"+file, data, func(rel string) ([]byte, error) {
		return readLimited(func() (io.ReadCloser, error) { return builtin.Open(path.Clean(rel)) }, ProfileBytesMax)
	})
}

// Load reads and validates the scenario file at path; a latency profile
// is read relative to the file's folder.
func Load(file string) (*Scenario, error) {
	data, err := readLimited(func() (io.ReadCloser, error) { return os.Open(file) }, FileBytesMax)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	dir := filepath.Dir(file)
	return Parse(file, data, func(rel string) ([]byte, error) {
		if !filepath.IsAbs(rel) {
			rel = filepath.Join(dir, rel)
		}
		return readLimited(func() (io.ReadCloser, error) { return os.Open(rel) }, ProfileBytesMax)
	})
}

// Find loads a scenario named on a command line: a file when arg names one
// (or looks like a path: it has a slash or ends in .yaml or .yml), else a
// built-in scenario.
func Find(arg string) (*Scenario, error) {
	if strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator) ||
		strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		return Load(arg)
	}
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		return Load(arg)
	}
	return Builtin(arg)
}

// readLimited reads what open opens, refusing more than limit bytes.
func readLimited(open func() (io.ReadCloser, error), limit int64) ([]byte, error) {
	f, err := open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}

// Parse decodes and validates a scenario; name is how errors name the
// file, and readProfile reads a latency profile named relative to it.
func Parse(name string, data []byte, readProfile func(rel string) ([]byte, error)) (*Scenario, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		line := 0
		if len(root.Content) > 0 {
			line = root.Content[0].Line
		}
		return nil, &Error{File: name, Fields: []FieldError{{Line: line, Path: "(file)", Msg: "a scenario is a mapping of keys (name, nodes, traffic, expect, ...)"}}}
	}
	lines := map[string]int{}
	recordLines(root.Content[0], "", lines)

	s := defaults()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, decodeError(name, err, lines)
	}
	s.file, s.lines = name, lines
	if err := s.validate(readProfile); err != nil {
		return nil, err
	}
	return &s, nil
}

// recordLines notes the line of every mapping key and sequence item under
// its path (traffic[0].rate), whatever the schema says: the decoder's
// errors give a line, validation a path, and this joins the two.
func recordLines(n *yaml.Node, p string, lines map[string]int) {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			kp := k.Value
			if p != "" {
				kp = p + "." + k.Value
			}
			lines[kp] = k.Line
			recordLines(v, kp, lines)
		}
	case yaml.SequenceNode:
		for i, e := range n.Content {
			ep := p + "[" + strconv.Itoa(i) + "]"
			lines[ep] = e.Line
			recordLines(e, ep, lines)
		}
	}
}

// decoderLine matches the "line N: " prefix of the decoder's errors, and
// unknownField its message for a key the schema lacks.
var (
	decoderLine  = regexp.MustCompile(`^line (\d+): (.*)$`)
	unknownField = regexp.MustCompile(`^field (\S+) not found in type \S+$`)
)

// decodeError turns the decoder's errors into FieldErrors that name the
// key at the line the decoder gives.
func decodeError(name string, err error, lines map[string]int) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return fmt.Errorf("%s: %w: %w", name, ErrInvalid, err)
	}
	byLine := map[int]string{}
	for p, l := range lines {
		// The deepest key on a line is the one the decoder means.
		if q, ok := byLine[l]; !ok || len(p) > len(q) || (len(p) == len(q) && p < q) {
			byLine[l] = p
		}
	}
	e := &Error{File: name}
	for _, msg := range te.Errors {
		fe := FieldError{Path: "(value)", Msg: msg}
		if m := decoderLine.FindStringSubmatch(msg); m != nil {
			fe.Line, _ = strconv.Atoi(m[1])
			fe.Msg = m[2]
			if p, ok := byLine[fe.Line]; ok {
				fe.Path = p
			}
		}
		if m := unknownField.FindStringSubmatch(fe.Msg); m != nil {
			fe.Msg = fmt.Sprintf("unknown key %q", m[1])
			// Several keys may share the line (a flow mapping): name the
			// unknown one.
			best := ""
			for p, l := range lines {
				if l == fe.Line && (p == m[1] || strings.HasSuffix(p, "."+m[1])) && (best == "" || p < best) {
					best = p // the first in order, so the message is always the same
				}
			}
			if best != "" {
				fe.Path = best
			}
		}
		fe.Msg = strings.Replace(fe.Msg, "into time.Duration", "into a duration (write it with a unit: 100ms, 2s)", 1)
		e.Fields = append(e.Fields, fe)
	}
	slices.SortStableFunc(e.Fields, func(a, b FieldError) int { return a.Line - b.Line })
	return e
}
