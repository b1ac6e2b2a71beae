package actors

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// pureDirs are the pure packages, relative to this one: actors, the
// device model both the simulator and the live backend draw from, gen, the
// generation scheduler, and member, the membership view and key ownership
// the cluster's actors keep.
var pureDirs = map[string]string{".": "actors", "devicemodel": "devicemodel", "gen": "gen", "member": "member"}

// TestPurity fails the build if a non-test file of a pure package
// (pureDirs) reaches for what the runtime owns: the wall clock,
// goroutines, channels, select, locks, the global math/rand, or a map
// iteration (whose order would make a decision nondeterministic).
func TestPurity(t *testing.T) {
	for dir, name := range pureDirs {
		t.Run(name, func(t *testing.T) {
			fset := token.NewFileSet()
			paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
			if err != nil {
				t.Fatal(err)
			}
			var files []*ast.File
			for _, p := range paths {
				if strings.HasSuffix(p, "_test.go") {
					continue
				}
				f, err := parser.ParseFile(fset, p, nil, 0)
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, f)
			}
			if len(files) == 0 {
				t.Fatal("no source files found")
			}
			info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
			conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
			if _, err := conf.Check(name, fset, files, info); err != nil {
				t.Fatal(err)
			}
			for _, v := range checkPurity(fset, files, info) {
				t.Error(v)
			}
		})
	}
}

var bannedImports = map[string]string{
	"sync": "locks", "sync/atomic": "atomics", "math/rand": "the global math/rand",
	"os": "I/O", "net": "I/O", "syscall": "I/O", "unsafe": "unsafe", "runtime": "the runtime",
}

var bannedTime = map[string]bool{
	"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
	"AfterFunc": true, "Tick": true, "NewTimer": true, "NewTicker": true,
}

// Constructors are the only math/rand/v2 functions allowed: everything else
// at package level draws from the global source.
var allowedRand = map[string]bool{"New": true, "NewPCG": true, "NewChaCha8": true, "NewZipf": true}

func checkPurity(fset *token.FileSet, files []*ast.File, info *types.Info) []string {
	var out []string
	bad := func(n ast.Node, what string) {
		out = append(out, fset.Position(n.Pos()).String()+": "+what)
	}
	for _, f := range files {
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if why, ok := bannedImports[path]; ok {
				bad(imp, "imports "+path+" ("+why+" belong to the runtime)")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GoStmt:
				bad(n, "starts a goroutine")
			case *ast.SelectStmt:
				bad(n, "uses select")
			case *ast.ChanType:
				bad(n, "uses a channel type")
			case *ast.SendStmt:
				bad(n, "sends on a channel")
			case *ast.UnaryExpr:
				if n.Op == token.ARROW {
					bad(n, "receives from a channel")
				}
			case *ast.RangeStmt:
				if tv, ok := info.Types[n.X]; ok {
					if _, isMap := tv.Type.Underlying().(*types.Map); isMap {
						bad(n, "ranges over a map (iteration order is random)")
					}
				}
			case *ast.SelectorExpr:
				id, ok := n.X.(*ast.Ident)
				if !ok {
					break
				}
				pkg, ok := info.Uses[id].(*types.PkgName)
				if !ok {
					break
				}
				switch pkg.Imported().Path() {
				case "time":
					if bannedTime[n.Sel.Name] {
						bad(n, "reads the wall clock or sleeps: time."+n.Sel.Name)
					}
				case "math/rand/v2":
					if obj, ok := info.Uses[n.Sel].(*types.Func); ok && !allowedRand[obj.Name()] {
						bad(n, "draws from the global random source: rand."+n.Sel.Name)
					}
				}
			}
			return true
		})
	}
	return out
}

// TestPurityCheckerCatches makes sure the checker itself sees each kind of
// violation, so a green TestPurity means something.
func TestPurityCheckerCatches(t *testing.T) {
	src := `package actors
import (
	"math/rand/v2"
	"sync"
	"time"
)
var mu sync.Mutex
func f(m map[int]int) {
	_ = time.Now()
	go func() {}()
	c := make(chan int)
	select { case <-c: }
	c <- 1
	_ = rand.IntN(3)
	_ = rand.New(rand.NewPCG(1, 2))
	for k := range m { _ = k }
}`
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bad.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(dir, "bad.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: importer.ForCompiler(fset, "source", nil)}
	if _, err := conf.Check("actors", fset, []*ast.File{f}, info); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(checkPurity(fset, []*ast.File{f}, info), "\n")
	for _, want := range []string{"imports sync", "time.Now", "goroutine", "channel type", "uses select",
		"sends on a channel", "receives from a channel", "rand.IntN", "ranges over a map"} {
		if !strings.Contains(got, want) {
			t.Errorf("checker missed %q; it said:\n%s", want, got)
		}
	}
	if strings.Contains(got, "rand.New") {
		t.Errorf("checker flagged the allowed constructor rand.New:\n%s", got)
	}
}
