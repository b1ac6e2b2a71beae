package scenarios

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/batchd/batchd/actors/schema"
)

// builtin holds the scenario files of this folder, their profiles, and
// the cluster scenarios (cluster/).
//
//go:embed *.yaml profiles cluster/*.yaml
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
	// opposed to reading it. It is the schema's, which the serve
	// configuration shares.
	ErrInvalid = schema.ErrInvalid
	// ErrUnknown is wrapped by Find for a name that is neither a file nor
	// a built-in scenario.
	ErrUnknown = errors.New("unknown scenario")
)

// Error is a scenario's mistakes, one a line, each as "file:line: path:
// message", and FieldError one of them (the schema's loader's). Error
// wraps ErrInvalid.
type (
	Error      = schema.Error
	FieldError = schema.FieldError
)

// Builtins returns the names of the built-in scenarios, sorted.
func Builtins() []string { return builtinNames(".") }

// builtinNames lists the embedded scenario files of dir (their names
// without .yaml), sorted.
func builtinNames(dir string) []string {
	entries, err := fs.ReadDir(builtin, dir)
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
		if slices.Contains(ClusterBuiltins(), name) {
			return nil, fmt.Errorf("scenario %q: %w (built-in: %s); %s is a cluster scenario: batchd sim-cluster %s", name, ErrUnknown, strings.Join(Builtins(), ", "), name, name)
		}
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
	data, readProfile, err := readFile(file)
	if err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return Parse(file, data, readProfile)
}

// readFile reads the scenario file at file, bounded, and returns it with
// the reader of the profiles it names (relative to its folder).
func readFile(file string) ([]byte, func(string) ([]byte, error), error) {
	data, err := readLimited(func() (io.ReadCloser, error) { return os.Open(file) }, FileBytesMax)
	dir := filepath.Dir(file)
	return data, func(rel string) ([]byte, error) {
		if !filepath.IsAbs(rel) {
			rel = filepath.Join(dir, rel)
		}
		return readLimited(func() (io.ReadCloser, error) { return os.Open(rel) }, ProfileBytesMax)
	}, err
}

// isFile says whether a command line's scenario names a file: it looks
// like a path (a slash, or .yaml or .yml at the end), or one exists.
func isFile(arg string) bool {
	if strings.ContainsRune(arg, '/') || strings.ContainsRune(arg, filepath.Separator) ||
		strings.HasSuffix(arg, ".yaml") || strings.HasSuffix(arg, ".yml") {
		return true
	}
	st, err := os.Stat(arg)
	return err == nil && st.Mode().IsRegular()
}

// Find loads a scenario named on a command line: a file when arg names one
// (or looks like a path: it has a slash or ends in .yaml or .yml), else a
// built-in scenario.
func Find(arg string) (*Scenario, error) {
	if isFile(arg) {
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
	if isCluster(data) {
		return nil, &Error{Fields: []FieldError{{Where: name, Path: "cluster",
			Msg: "a cluster scenario (it has a cluster: section): run it with batchd sim-cluster FILE"}}}
	}
	s := defaults()
	lines, err := schema.Decode(name, data, &s)
	if err != nil {
		return nil, err
	}
	s.file, s.lines = name, lines
	if err := s.validate(readProfile); err != nil {
		return nil, err
	}
	return &s, nil
}
