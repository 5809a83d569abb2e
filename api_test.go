package ipam_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The root package is selection and allocation: garbage collection lives in
// package gc, SpiderSubnet in package subnet. This test keeps it that way
// (issue 28): at most 120 exported top-level identifiers (types, functions,
// variables, constants; methods not counted) and 7,500 lines of non-test
// code, and no exported name that starts as another product's (GC*,
// AutoPool*, Subnet*).
func TestRootAPISurface(t *testing.T) {
	const maxExported, maxLines = 120, 7500
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var exported []string
	lines := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		lines += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					exported = append(exported, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							exported = append(exported, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								exported = append(exported, n.Name)
							}
						}
					}
				}
			}
		}
	}
	require.LessOrEqual(t, len(exported), maxExported, "exported top-level identifiers of the root package: %v", exported)
	require.LessOrEqual(t, lines, maxLines, "non-test lines of the root package")
	for _, n := range exported {
		for _, p := range []string{"GC", "AutoPool", "Subnet"} {
			require.False(t, strings.HasPrefix(n, p), "%s belongs in package gc or subnet", n)
		}
	}
	t.Logf("%d exported identifiers, %d non-test lines", len(exported), lines)
}
