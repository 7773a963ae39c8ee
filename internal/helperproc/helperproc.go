// Package helperproc runs a helper program of the internal/testdeps module
// and calls it over JSON lines on its stdin and stdout. That module holds
// the test-only dependencies (testcontainers, chromedp); running them in a
// program of their own keeps them out of the main module's go.mod, so a
// program that imports Shoal does not get them in its module graph.
//
// The program is run with `go run` (its binary is cached by the go command
// after the first build). It serves requests concurrently and ends, cleaning
// up what it started, when its stdin closes: also when the test process is
// killed.
//
// The protocol (the helpers' side is internal/testdeps/jsonlines):
//
//	request:  {"id":1,"op":"run","deadline":"2026-01-02T15:04:05Z","args":{...}}
//	response: {"id":1,"result":{...}}  or  {"id":1,"error":"..."}
package helperproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// ErrExited means the helper program ended (or could not be built); the
// error says how, with the end of its standard error.
var ErrExited = errors.New("helper program exited")

// moduleDir returns the directory of the internal/testdeps module in the source
// tree.
func moduleDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("helperproc: cannot locate the source tree")
	}
	dir := filepath.Join(filepath.Dir(file), "..", "testdeps")
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("helperproc: the internal/testdeps module: %w", err)
	}
	return dir, nil
}

// Proc is a running helper program. Its methods are safe for concurrent use.
type Proc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tail
	done   chan struct{} // closed when the program's stdout ended

	wmu sync.Mutex // serializes requests on stdin

	mu      sync.Mutex
	nextID  uint64
	pending map[uint64]chan response
	err     error // why the program ended; set before done is closed
}

type request struct {
	ID       uint64    `json:"id"`
	Op       string    `json:"op"`
	Deadline time.Time `json:"deadline,omitzero"`
	Args     any       `json:"args,omitempty"`
}

type response struct {
	ID     uint64          `json:"id"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Start runs the program internal/testdeps/cmd/<name>. The program's module
// is built on its own (GOWORK=off), with the environment of this process.
func Start(name string) (*Proc, error) {
	dir, err := moduleDir()
	if err != nil {
		return nil, err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		if goTool, err = exec.LookPath(filepath.Join(runtime.GOROOT(), "bin", "go")); err != nil {
			return nil, fmt.Errorf("helperproc: no go command to run %s: %w", name, err)
		}
	}
	cmd := exec.Command(goTool, "run", "./cmd/"+name)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	p := &Proc{name: name, cmd: cmd, stderr: &tail{max: 16 << 10}, done: make(chan struct{}), pending: map[uint64]chan response{}}
	cmd.Stderr = p.stderr
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("helperproc: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("helperproc: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("helperproc: start %s: %w", name, err)
	}
	go p.read(stdout)
	return p, nil
}

// read dispatches the responses until the program's stdout ends, then
// waits for the program and fails what is still pending.
func (p *Proc) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
	for sc.Scan() {
		var r response
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			continue // not a response: the program printed something else
		}
		p.mu.Lock()
		ch := p.pending[r.ID]
		delete(p.pending, r.ID)
		p.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	waitErr := p.cmd.Wait()
	p.mu.Lock()
	p.err = fmt.Errorf("%w: %s (%v)%s", ErrExited, p.name, waitErr, p.stderr.suffix())
	for id, ch := range p.pending {
		close(ch)
		delete(p.pending, id)
	}
	p.mu.Unlock()
	close(p.done)
}

// Call sends op with args (marshaled to JSON; nil for none) and unmarshals
// the result into result (may be nil). The deadline of ctx is the
// program's deadline for the op too; when ctx ends first Call returns its
// error and the program's answer is dropped.
func (p *Proc) Call(ctx context.Context, op string, args, result any) error {
	ch := make(chan response, 1)
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return fmt.Errorf("helperproc: %s: %w", op, err)
	}
	p.nextID++
	id := p.nextID
	p.pending[id] = ch
	p.mu.Unlock()
	forget := func() {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
	}

	req := request{ID: id, Op: op, Args: args}
	req.Deadline, _ = ctx.Deadline()
	line, err := json.Marshal(req)
	if err != nil {
		forget()
		return fmt.Errorf("helperproc: %s: %w", op, err)
	}
	p.wmu.Lock()
	_, err = p.stdin.Write(append(line, '\n'))
	p.wmu.Unlock()
	if err != nil {
		forget()
		<-p.done // a failed write means the program is gone: say why
		return fmt.Errorf("helperproc: %s: %w", op, p.err)
	}

	select {
	case <-ctx.Done():
		forget()
		return fmt.Errorf("helperproc: %s: %w", op, ctx.Err())
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("helperproc: %s: %w", op, p.err)
		}
		if r.Error != "" {
			return fmt.Errorf("%s %s: %s", p.name, op, r.Error)
		}
		if result != nil && len(r.Result) > 0 {
			if err := json.Unmarshal(r.Result, result); err != nil {
				return fmt.Errorf("helperproc: %s: decode the result: %w", op, err)
			}
		}
		return nil
	}
}

// Close closes the program's stdin, so it cleans up and exits, and waits
// for it to exit until ctx ends.
func (p *Proc) Close(ctx context.Context) error {
	p.wmu.Lock()
	err := p.stdin.Close()
	p.wmu.Unlock()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("helperproc: close %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("helperproc: %s did not exit: %w", p.name, ctx.Err())
	}
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int

	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// suffix is ": <what it holds>" for an error message, or "".
func (t *tail) suffix() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.buf) == 0 {
		return ""
	}
	return "; its standard error ends:\n" + string(t.buf)
}
