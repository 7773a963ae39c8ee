// Package scenario replays data-driven test files, in the style of
// go.etcd.io/raft's testdata: a case is one command line, a line "----",
// and the expected output up to the next blank line; blank lines and lines
// starting with # between cases are kept as they are. With rewrite, the
// file is written back with the output the commands gave (review the diff).
//
// The machines under test (allocation strategies, the shard and region
// cores) each bring their own commands; this package only reads, compares
// and rewrites the files.
package scenario

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// RunFunc runs one command line and returns what it printed, lines joined
// by "\n". where is "file:line", for error messages.
type RunFunc func(where, line string) string

// RunDir runs every file matching pattern as a subtest, each with a fresh
// runner from newRun.
func RunDir(t *testing.T, pattern string, rewrite bool, newRun func(t *testing.T) RunFunc) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenario files match %s: %v", pattern, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) { Run(t, file, rewrite, newRun(t)) })
	}
}

// Run replays one file through run.
func Run(t *testing.T, file string, rewrite bool, run RunFunc) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var out strings.Builder // the rewritten file
	for i := 0; i < len(lines); {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			i++
			continue
		}
		cmdLine, pos := line, i+1
		i++
		if i >= len(lines) || lines[i] != "----" {
			t.Fatalf("%s:%d: want ---- after the command", file, pos)
		}
		i++
		var want []string
		for i < len(lines) && lines[i] != "" {
			want = append(want, lines[i])
			i++
		}
		where := file + ":" + strconv.Itoa(pos)
		got := run(where, cmdLine)
		if !rewrite && got != strings.Join(want, "\n") {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", where, cmdLine, got, strings.Join(want, "\n"))
		}
		out.WriteString(cmdLine + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
	}
	if rewrite {
		s := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Command is one parsed command line: its name, its positional arguments
// and its key=value arguments.
type Command struct {
	Name string
	Pos  []string
	KV   map[string]string
}

// Parse splits a command line into its name and arguments.
func Parse(line string) Command {
	fields := strings.Fields(line)
	c := Command{KV: map[string]string{}}
	if len(fields) == 0 {
		return c
	}
	c.Name = fields[0]
	for _, a := range fields[1:] {
		if k, v, ok := strings.Cut(a, "="); ok {
			c.KV[k] = v
		} else {
			c.Pos = append(c.Pos, a)
		}
	}
	return c
}
