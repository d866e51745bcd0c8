package pstate_test

// The examples are what users copy: a deferred teardown (ps.Close) that log.Fatal or os.Exit
// would skip is a leak they copy too. Every function of examples/*/main.go that defers must not
// call log.Fatal*, log.Panic* or os.Exit (before: tworanks' main deferred ps.Close and called
// log.Fatal on every error).

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"testing"
)

func TestExamplesNeverSkipTheirDeferredTeardown(t *testing.T) {
	files, err := filepath.Glob("examples/*/main.go")
	must(t, err)
	if len(files) == 0 {
		t.Fatal("no examples/*/main.go")
	}
	exits := map[string]bool{"log.Fatal": true, "log.Fatalf": true, "log.Fatalln": true, "log.Panic": true,
		"log.Panicf": true, "log.Panicln": true, "os.Exit": true}
	fset := token.NewFileSet()
	for _, file := range files {
		f, err := parser.ParseFile(fset, file, nil, 0)
		must(t, err)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			var defers []token.Pos
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if d, ok := n.(*ast.DeferStmt); ok {
					defers = append(defers, d.Pos())
				}
				return true
			})
			if len(defers) == 0 {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, ok := sel.X.(*ast.Ident)
				if ok && exits[pkg.Name+"."+sel.Sel.Name] && call.Pos() > defers[0] {
					t.Errorf("%s: %s.%s after the defer at %s skips it: return the error instead",
						fset.Position(call.Pos()), pkg.Name, sel.Sel.Name, fset.Position(defers[0]))
				}
				return true
			})
		}
	}
}
