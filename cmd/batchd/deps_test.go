package main

import (
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// buildTags are the build configurations whose imports between the module's
// packages (or their third-party imports) differ: the default build links
// protoactor-go into engine, -tags hollywood links hollywood instead. A tag that changes which module
// packages import which belongs here.
var buildTags = []string{"", "hollywood"}

// mayImport is the design's picture of the packages (ARCHITECTURE.md):
// dependencies point one way, cmd → engine, sim, scenarios, cudabridge,
// cluster → actors. Each top-level folder of the module lists the top-level
// folders its packages may import (its own included). scenarios turns YAML
// into a sim.Config, so it sits on sim. A new top-level folder must be placed
// here, and in ARCHITECTURE.md, before its packages pass.
var mayImport = map[string][]string{
	"actors":     {"actors"},
	"engine":     {"engine", "actors"},
	"sim":        {"sim", "actors"},
	"scenarios":  {"scenarios", "sim", "actors"},
	"cudabridge": {"cudabridge", "actors"},
	"cluster":    {"cluster", "actors"},
	"cmd":        {"cmd", "engine", "sim", "scenarios", "cudabridge", "cluster", "actors"},
}

// mayAlsoImport names the packages allowed an import their top-level folder
// is not, each with the folders it may also import and why. Keep it short:
// every entry is a crossing of the design's picture.
var mayAlsoImport = map[string][]string{
	// The fidelity check runs one workload live and in the simulator and
	// compares them: the one package that sits on both runtimes.
	"engine/fidelity": {"sim"},
	// The server assembles a node as cmd did, the cpu and cuda backends
	// included, so it opens cudabridge's devices; cudabridge still
	// imports no engine package (the adapter between them is the
	// server's).
	// It is also what joins a node to its cluster (memberlist, and the
	// data plane to come), as it opens the GPUs.
	"engine/server": {"cudabridge", "cluster"},
}

// modPkg is one package of the module, as `go list` sees it.
type modPkg struct {
	dir     string
	imports map[string]bool // module packages it imports (not its tests), relative paths, any build
	// deps are the module packages it depends on, directly or not (not its
	// tests), by build tag: go list's .Deps, the graph `go list -deps`
	// walks.
	deps map[string]map[string]bool
}

// serveChain is the server's side of the picture, top to bottom:
// cmd → engine/server → {httpapi, jobs, record, config} → engine → actors.
// TestServeChain checks it.
var serveChain = [][]string{
	{"cmd/batchd"},
	{"engine/server"},
	{"engine/config", "engine/httpapi", "engine/jobs", "engine/record"},
	{"engine"},
	{"actors"},
}

// TestPackageDeps checks the docs and the design against the module's real
// imports (test files' imports do not count):
//
//   - every package has a doc.go whose package comment has one sentence
//     "Imported by: a, b (notes)." naming, relative to the module root,
//     exactly the module packages that import it in some build
//     (buildTags), or "Imported by: nothing (...)." when none does;
//   - every import between module packages is allowed by mayImport (or, for
//     the few packages it names, mayAlsoImport): actors imports nothing else
//     of the module, and nothing but cmd imports cmd.
func TestPackageDeps(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the module's imports cannot be listed; skipping the dependency check")
	}
	pkgs := listModule(t, goBin)
	for _, p := range sortedKeys(mayAlsoImport) {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("mayAlsoImport names %s, which is not a package of the module: drop it", p)
		}
	}

	importers := map[string][]string{}
	for _, p := range sortedKeys(pkgs) {
		for imp := range pkgs[p].imports {
			importers[imp] = append(importers[imp], p)
		}
	}

	for _, p := range sortedKeys(pkgs) {
		doc := filepath.Join(pkgs[p].dir, "doc.go")
		rel := filepath.ToSlash(filepath.Join(p, "doc.go"))
		stated, err := readImportedBy(doc)
		if err != nil {
			t.Errorf("package %s: %v", p, err)
			continue
		}
		for _, s := range stated {
			if _, ok := pkgs[s]; !ok {
				t.Errorf("%s: \"Imported by:\" names %s, which is not a package of the module", rel, s)
			}
		}
		actual := importers[p]
		for _, imp := range actual {
			if !slices.Contains(stated, imp) {
				t.Errorf("%s: \"Imported by:\" leaves out %s, which imports %s: add it to the line", rel, imp, p)
			}
		}
		for _, s := range stated {
			if _, ok := pkgs[s]; ok && !slices.Contains(actual, s) {
				t.Errorf("%s: \"Imported by:\" names %s, which does not import %s in any build: drop it", rel, s, p)
			}
		}
	}

	for _, p := range sortedKeys(pkgs) {
		top := topFolder(p)
		allowed, ok := mayImport[top]
		if !ok {
			t.Errorf("package %s is in top-level folder %q, which the design's picture (mayImport here, ARCHITECTURE.md) does not place", p, top)
			continue
		}
		allowed = append(slices.Clone(allowed), mayAlsoImport[p]...)
		for _, imp := range sortedKeys(pkgs[p].imports) {
			if !slices.Contains(allowed, topFolder(imp)) {
				t.Errorf("package %s imports %s: dependencies point one way, and %s/ may import only %s/", p, imp, top, strings.Join(allowed, "/, "))
			}
		}
	}
}

// TestServeChain checks serveChain against `go list -deps`, in every
// build (buildTags): each package of a level depends, directly or not, on
// no package of a level above it; and each level but the last depends on
// every package of the one below it, so the chain is the real shape, not
// merely allowed.
func TestServeChain(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH, so the module's dependencies cannot be listed; skipping the chain check")
	}
	pkgs := listModule(t, goBin)
	for _, tags := range buildTags {
		for lvl, level := range serveChain {
			for _, p := range level {
				mp := pkgs[p]
				if mp == nil {
					t.Errorf("serveChain names %s, which is not a package of the module", p)
					continue
				}
				deps := mp.deps[tags]
				for _, above := range serveChain[:lvl] {
					for _, a := range above {
						if deps[a] {
							t.Errorf("-tags=%q: %s depends on %s, above it in the chain (%s)", tags, p, a, chainString())
						}
					}
				}
				if lvl+1 < len(serveChain) {
					for _, below := range serveChain[lvl+1] {
						if !deps[below] {
							t.Errorf("-tags=%q: %s does not depend on %s, the level below it in the chain (%s)", tags, p, below, chainString())
						}
					}
				}
			}
		}
	}
}

// chainString is serveChain as the docs draw it.
func chainString() string {
	var b strings.Builder
	for i, level := range serveChain {
		if i > 0 {
			b.WriteString(" → ")
		}
		if len(level) > 1 {
			b.WriteString("{" + strings.Join(level, ", ") + "}")
		} else {
			b.WriteString(level[0])
		}
	}
	return b.String()
}

// listModule runs `go list` over the module in every build configuration
// and returns its packages, keyed by path relative to the module root ("."
// for the root), with the module packages each imports in any of them.
func listModule(t *testing.T, goBin string) map[string]*modPkg {
	t.Helper()
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		t.Fatalf("go env GOMOD: not inside a module")
	}
	root := filepath.Dir(gomod)

	pkgs := map[string]*modPkg{}
	for _, tags := range buildTags {
		cmd := exec.Command(goBin, "list", "-tags="+tags, "-f", "{{.Module.Path}}\t{{.ImportPath}}\t{{.Dir}}\t{{join .Imports \" \"}}\t{{join .Deps \" \"}}", "./...")
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -tags=%q ./...: %v\n%s", tags, err, stderr.String())
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Split(line, "\t")
			if len(f) != 5 {
				t.Fatalf("go list: unexpected line %q", line)
			}
			mod, path, dir := f[0], f[1], f[2]
			rel, ok := relPath(mod, path)
			if !ok {
				t.Fatalf("go list: package %s is outside module %s", path, mod)
			}
			p := pkgs[rel]
			if p == nil {
				p = &modPkg{dir: dir, imports: map[string]bool{}, deps: map[string]map[string]bool{}}
				pkgs[rel] = p
			}
			for _, imp := range strings.Fields(f[3]) {
				if r, ok := relPath(mod, imp); ok {
					p.imports[r] = true
				}
			}
			deps := map[string]bool{}
			for _, d := range strings.Fields(f[4]) {
				if r, ok := relPath(mod, d); ok {
					deps[r] = true
				}
			}
			p.deps[tags] = deps
		}
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// relPath returns path relative to the module path mod, and whether path
// is inside the module.
func relPath(mod, path string) (string, bool) {
	switch {
	case path == mod:
		return ".", true
	case strings.HasPrefix(path, mod+"/"):
		return path[len(mod)+1:], true
	}
	return "", false
}

// topFolder returns the first element of a module-relative package path.
func topFolder(rel string) string {
	top, _, _ := strings.Cut(rel, "/")
	return top
}

// readImportedBy reads the package comment of the doc.go at path and
// returns the packages its "Imported by:" sentence names (none for
// "nothing").
func readImportedBy(path string) ([]string, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("no doc.go saying what the package is for and who imports it: %v", err)
	}
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	if f.Doc == nil {
		return nil, fmt.Errorf("%s has no package comment", path)
	}
	return parseImportedBy(f.Doc.Text())
}

// parseImportedBy parses the one sentence of doc that starts a line with
// "Imported by:": it runs to the first period outside parentheses that ends
// the text or is followed by a space; parenthesised notes are ignored; the
// rest is a list of module-relative package paths separated by commas (or
// "and"), or the single word "nothing".
func parseImportedBy(doc string) ([]string, error) {
	const lead = "Imported by:"
	start, off := -1, 0
	for _, line := range strings.SplitAfter(doc, "\n") {
		if strings.HasPrefix(line, lead) {
			if start >= 0 {
				return nil, fmt.Errorf("package comment has more than one line starting %q", lead)
			}
			start = off
		}
		off += len(line)
	}
	if start < 0 {
		return nil, fmt.Errorf("package comment has no line starting %q (say who imports the package, or \"Imported by: nothing (...).\")", lead)
	}
	rest := strings.ReplaceAll(doc[start+len(lead):], "\n", " ")
	var list strings.Builder
	depth, end := 0, -1
	for i := 0; i < len(rest) && end < 0; i++ {
		switch c := rest[i]; {
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth < 0 {
				return nil, fmt.Errorf("%q: unbalanced parentheses", lead)
			}
		case depth > 0:
		case c == '.' && (i+1 == len(rest) || rest[i+1] == ' '):
			end = i
		default:
			list.WriteByte(c)
		}
	}
	if end < 0 {
		return nil, fmt.Errorf("%q: no period ends the sentence", lead)
	}
	var names []string
	for _, item := range strings.Split(strings.ReplaceAll(list.String(), " and ", ","), ",") {
		if item = strings.TrimSpace(item); item != "" {
			names = append(names, item)
		}
	}
	switch {
	case len(names) == 0:
		return nil, fmt.Errorf("%q names no package (write \"nothing\" if none imports it)", lead)
	case slices.Contains(names, "nothing"):
		if len(names) > 1 {
			return nil, fmt.Errorf("%q says nothing and names %v", lead, names)
		}
		return nil, nil
	}
	for _, n := range names {
		if strings.ContainsAny(n, " \t") {
			return nil, fmt.Errorf("%q: %q is not a package path (notes go in parentheses)", lead, n)
		}
	}
	return names, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestParseImportedBy checks the parser on the forms the doc.go files use
// and on the mistakes it must report.
func TestParseImportedBy(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want []string
		bad  bool
	}{
		{doc: "Package x.\n\nImported by: cmd/batchd, engine/config (its defaults; and tests). It imports y.\n", want: []string{"cmd/batchd", "engine/config"}},
		{doc: "Imported by: a (x), b and\nc/d.\n", want: []string{"a", "b", "c/d"}},
		{doc: "Imported by: nothing (a main package).\n"},
		{doc: "Imported by: cmd/batchd (built with -tags hollywood. And tests).\n", want: []string{"cmd/batchd"}},
		{doc: "Who imports it: cmd/batchd.\n", bad: true},
		{doc: "Imported by: cmd/batchd and tests.\n", bad: false, want: []string{"cmd/batchd", "tests"}},
		{doc: "Imported by: the runtime adapters.\n", bad: true},
		{doc: "Imported by: nothing, cmd/batchd.\n", bad: true},
		{doc: "Imported by: cmd/batchd\n", bad: true},
		{doc: "Imported by: a.\nImported by: b.\n", bad: true},
		{doc: "Imported by: a (b.\n", bad: true},
	} {
		got, err := parseImportedBy(c.doc)
		if c.bad {
			if err == nil {
				t.Errorf("parseImportedBy(%q) = %v, want an error", c.doc, got)
			}
			continue
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("parseImportedBy(%q) = %v, %v; want %v", c.doc, got, err, c.want)
		}
	}
}
