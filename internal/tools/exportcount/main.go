// Command exportcount prints, for each public (non-internal, non-test)
// package of the module in the current directory, how many exported
// identifiers it offers a user: "import/path count", then a total line.
//
// It counts what a user program can name or call: every exported
// package-level constant, variable, function and type, plus the exported
// methods of each exported type's method set (value and pointer, promoted
// methods included, an interface's own methods too). A type alias counts
// the methods of the type it stands for, because an alias exposes them
// all. Struct fields are not counted. Test files, commands (package main)
// and packages under an internal/ directory are left out: users cannot
// import them.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

type listed struct {
	ImportPath string
	Name       string
	Dir        string
	GoFiles    []string
	Module     *struct{ Main bool }
}

// verbose lists the identifiers counted, one a line, under each package.
var verbose = flag.Bool("v", false, "list the identifiers counted")

func main() {
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	out, err := exec.Command("go", append([]string{"list", "-json"}, patterns...)...).Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "exportcount: go list:", err)
		os.Exit(1)
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "source", nil)
	total := 0
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			fmt.Fprintln(os.Stderr, "exportcount: decode go list:", err)
			os.Exit(1)
		}
		if p.Module == nil || !p.Module.Main || isInternal(p.ImportPath) || p.Name == "main" || len(p.GoFiles) == 0 {
			continue
		}
		n, err := count(fset, imp, p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "exportcount: %s: %v\n", p.ImportPath, err)
			os.Exit(1)
		}
		total += n
		fmt.Printf("%s %d\n", p.ImportPath, n)
	}
	fmt.Printf("TOTAL %d\n", total)
}

func isInternal(path string) bool {
	return strings.HasSuffix(path, "/internal") || strings.Contains(path, "/internal/")
}

func count(fset *token.FileSet, imp types.Importer, p listed) (int, error) {
	var files []*ast.File
	for _, name := range p.GoFiles {
		f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			return 0, err
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: imp}
	pkg, err := conf.Check(p.ImportPath, fset, files, nil)
	if err != nil {
		return 0, err
	}
	n := 0
	scope := pkg.Scope()
	for _, name := range scope.Names() {
		obj := scope.Lookup(name)
		if !obj.Exported() {
			continue
		}
		n++
		var methods []string
		if tn, ok := obj.(*types.TypeName); ok {
			methods = exportedMethods(tn.Type())
			n += len(methods)
		}
		if *verbose {
			fmt.Printf("\t%s %s\n", name, strings.Join(methods, " "))
		}
	}
	return n, nil
}

// exportedMethods lists the exported methods of t's method set and of
// *t's, each once.
func exportedMethods(t types.Type) []string {
	t = types.Unalias(t)
	seen := map[string]bool{}
	add := func(ms *types.MethodSet) {
		for i := range ms.Len() {
			if f := ms.At(i).Obj(); f.Exported() {
				seen[f.Name()] = true
			}
		}
	}
	add(types.NewMethodSet(t))
	if _, isIface := t.Underlying().(*types.Interface); !isIface {
		add(types.NewMethodSet(types.NewPointer(t)))
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}
