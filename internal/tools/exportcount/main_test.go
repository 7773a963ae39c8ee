package main

import (
	"go/importer"
	"go/token"
	"os"
	"path/filepath"
	"testing"
)

// count takes package-level names and the exported methods of each
// exported type's method set; an alias counts its target's methods, and
// unexported names, fields and methods count for nothing.
func TestCountTakesNamesMethodSetsAndAliasTargets(t *testing.T) {
	dir := t.TempDir()
	src := `package p

const C = 1
var V, w = 2, 3
func F() {}
func g() {}

type T struct{ Field int }
func (T) A() {}
func (*T) B() {}
func (T) c() {}

type hidden struct{}
func (hidden) H() {}
func (*hidden) I() {}

// Alias exposes hidden's methods, H and I.
type Alias = hidden

type Embeds struct{ T }

type I interface{ M(); n() }
`
	if err := os.WriteFile(filepath.Join(dir, "p.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	n, err := count(fset, importer.ForCompiler(fset, "source", nil), listed{ImportPath: "p", Dir: dir, GoFiles: []string{"p.go"}})
	if err != nil {
		t.Fatal(err)
	}
	// C, V, F; T+A+B; Alias+H+I; Embeds+A+B (promoted); I+M.
	if want := 3 + 3 + 3 + 3 + 2; n != want {
		t.Fatalf("count = %d, want %d", n, want)
	}
}
