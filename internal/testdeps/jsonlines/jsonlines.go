// Package jsonlines serves the helper programs' side of the JSON-lines
// protocol between a test process of the main module and a helper of this
// module: one request per line on stdin, one response per line on stdout,
// matched by id, each request handled in a goroutine of its own.
//
//	request:  {"id":1,"op":"run","deadline":"2026-01-02T15:04:05Z","args":{...}}
//	response: {"id":1,"result":{...}}  or  {"id":1,"error":"..."}
//
// The client side is internal/helperproc of the main module.
package jsonlines

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Request is one call.
type Request struct {
	ID       uint64          `json:"id"`
	Op       string          `json:"op"`
	Deadline time.Time       `json:"deadline,omitzero"`
	Args     json.RawMessage `json:"args,omitempty"`
}

// Response answers the request of the same ID.
type Response struct {
	ID     uint64 `json:"id"`
	Result any    `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// Handler answers one request; args is the request's raw args. The context
// ends at the request's deadline, or when the server stops.
type Handler func(ctx context.Context, op string, args json.RawMessage) (result any, err error)

// ErrUnknownOp is the error for an op the helper does not know.
var ErrUnknownOp = errors.New("unknown op")

// Serve reads requests from in until EOF or until ctx ends, answers each on
// out, and returns after every handler has returned (their contexts are
// canceled then). It returns nil at EOF.
func Serve(ctx context.Context, in io.Reader, out io.Writer, handle Handler) error {
	ctx, cancel := context.WithCancel(ctx)
	var (
		wmu sync.Mutex
		enc = json.NewEncoder(out)
		wg  sync.WaitGroup
	)
	reply := func(r Response) {
		wmu.Lock()
		defer wmu.Unlock()
		if err := enc.Encode(r); err != nil {
			cancel() // the client is gone
		}
	}
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64*1024), 64*1024*1024)
		for sc.Scan() {
			select {
			case lines <- append([]byte(nil), sc.Bytes()...):
			case <-ctx.Done():
				return
			}
		}
		readErr <- sc.Err()
	}()
	// The client is gone when Serve returns: cancel what is in flight.
	defer func() {
		cancel()
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-readErr:
			return err
		case line := <-lines:
			var req Request
			if err := json.Unmarshal(line, &req); err != nil {
				return fmt.Errorf("jsonlines: bad request %q: %w", line, err)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				rctx, rcancel := ctx, context.CancelFunc(func() {})
				if !req.Deadline.IsZero() {
					rctx, rcancel = context.WithDeadline(ctx, req.Deadline)
				}
				defer rcancel()
				result, err := handle(rctx, req.Op, req.Args)
				resp := Response{ID: req.ID, Result: result}
				if err != nil {
					resp = Response{ID: req.ID, Error: err.Error()}
				}
				reply(resp)
			}()
		}
	}
}

// Decode unmarshals a request's args into a new T.
func Decode[T any](args json.RawMessage) (T, error) {
	var v T
	if len(args) == 0 {
		return v, nil
	}
	if err := json.Unmarshal(args, &v); err != nil {
		return v, fmt.Errorf("bad args: %w", err)
	}
	return v, nil
}
