package clustertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// requestTimeout bounds one API request from the test: above the nodes'
// 15 s ask timeout, so the node answers first.
const requestTimeout = 20 * time.Second

// errorPause paces a client whose request failed at once (a node that is
// down refuses connections), so it does not spin; it decides nothing.
const errorPause = 50 * time.Millisecond

// maxErrorPause bounds a counter client's back-off: after each failed
// request in a row it waits twice as long, from errorPause, as a client
// of a service that is down should. Every add that fails without an
// answer may land at any later time, and the linearizability search grows
// exponentially with their number on a counter: clients that kept asking
// every 50 ms through a whole outage (Postgres restarted, every node
// fenced and restarted) left hundreds, and the search ran out of time.
const maxErrorPause = time.Second

var httpClient = &http.Client{Timeout: requestTimeout}

// errUnknown marks an operation whose outcome the client could not learn.
var errUnknown = errors.New("outcome unknown")

// errNotDone marks a request the API refused with 503: the entity was
// unavailable (its shard backing off after a failure, a recovery that
// failed) and the command never reached it, so nothing was done. Such a
// request is no operation; recorded as unknown instead, the adds refused
// while Postgres is down (hundreds, at once each) would each be an add
// that may land at any later time, and the linearizability search over
// them outgrows any bound.
var errNotDone = errors.New("refused: nothing done")

// Payments drives settlements through the nodes round-robin, each on a
// new order, and keeps the orders the API acknowledged (200).
type Payments struct {
	cl      *Cluster
	run     string
	next    atomic.Int64
	cancel  context.CancelFunc
	done    sync.WaitGroup
	mu      sync.Mutex
	acked   []string
	failed  int
	unknown int
	notSent int // the node refused the connection: it was down
}

// StartPayments starts workers clients settling payments until Stop.
func (c *Cluster) StartPayments(workers int) *Payments {
	ctx, cancel := context.WithCancel(context.Background())
	p := &Payments{cl: c, run: fmt.Sprintf("r%d", time.Now().UnixNano()%1e9), cancel: cancel}
	for range workers {
		p.done.Go(func() {
			for ctx.Err() == nil {
				n := p.next.Add(1)
				order := fmt.Sprintf("%so%d", p.run, n)
				node := c.Nodes[int(n)%len(c.Nodes)]
				status, err := settle(ctx, node.URL, order)
				p.mu.Lock()
				switch {
				case err == nil && status == http.StatusOK:
					p.acked = append(p.acked, order)
				case errors.Is(err, syscall.ECONNREFUSED):
					p.notSent++
				case err != nil || status >= 500:
					p.unknown++
				default:
					p.failed++
				}
				p.mu.Unlock()
				if err != nil || status != http.StatusOK {
					pause(ctx, errorPause)
				}
			}
		})
	}
	return p
}

// Stop stops the clients and waits for their requests in flight.
func (p *Payments) Stop() {
	p.cancel()
	p.done.Wait()
}

// Acked returns the acknowledged orders.
func (p *Payments) Acked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.acked...)
}

func (p *Payments) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Sprintf("%d acknowledged, %d refused, %d unanswered or failed, %d not sent (node down)", len(p.acked), p.failed, p.unknown, p.notSent)
}

// settle PUTs a settlement of order at shop-1 through the node at url.
func settle(ctx context.Context, url, order string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url+"/00/ec/settlements/shop-1/"+order+"/payment", strings.NewReader(`{"amount":100}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Tenant-Id", "example")
	req.Header.Set("Authorization", "Bearer clustertest")
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// CheckPaymentsKept fails the test unless every acknowledged order is
// settled in the journal, and, after healing, answers a repeated
// settlement with 200 within bound (the entity is reachable: a completed
// payment answers a repeat at once). It returns how long the slowest
// order took to answer.
func (c *Cluster) CheckPaymentsKept(ctx context.Context, acked []string, bound time.Duration) time.Duration {
	c.t.Helper()
	if len(acked) == 0 {
		c.t.Fatal("no payment was acknowledged: the workload tested nothing")
	}
	rows, err := c.DB.Query(ctx, `SELECT persistence_id FROM event_journal WHERE manifest = 'payment.SettlementSuccessConfirmed'`)
	if err != nil {
		c.t.Fatalf("clustertest: journal: %v", err)
	}
	settled := map[string]bool{}
	for rows.Next() {
		var pid string
		if err := rows.Scan(&pid); err != nil {
			c.t.Fatal(err)
		}
		settled[pid[strings.LastIndex(pid, ":")+1:]] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	var lost []string
	for _, o := range acked {
		if !settled[o] {
			lost = append(lost, o)
		}
	}
	if len(lost) > 0 {
		c.t.Errorf("%d of %d acknowledged payments are not settled in the journal: %v", len(lost), len(acked), first(lost, 10))
	}
	return c.checkReachable(ctx, acked, bound, func(ctx context.Context, url, order string) bool {
		status, err := settle(ctx, url, order)
		return err == nil && status == http.StatusOK
	})
}

// checkReachable asks every key through the nodes in turn until ok, all
// within bound from now; it fails the test for keys that never answered
// and returns how long the slowest took.
func (c *Cluster) checkReachable(ctx context.Context, keys []string, bound time.Duration, ok func(context.Context, string, string) bool) time.Duration {
	c.t.Helper()
	start := time.Now()
	deadline := start.Add(bound)
	var mu sync.Mutex
	var slowest time.Duration
	var unreachable []string
	work := make(chan string)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for k := range work {
				answered := false
				for i := 0; time.Now().Before(deadline); i++ {
					node := c.Nodes[i%len(c.Nodes)]
					if ok(ctx, node.URL, k) {
						answered = true
						break
					}
					pause(ctx, errorPause)
				}
				mu.Lock()
				if answered {
					slowest = max(slowest, time.Since(start))
				} else {
					unreachable = append(unreachable, k)
				}
				mu.Unlock()
			}
		})
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	if len(unreachable) > 0 {
		c.t.Errorf("%d of %d entities did not answer within %v after healing: %v", len(unreachable), len(keys), bound, first(unreachable, 10))
	}
	return slowest
}

func first(s []string, n int) []string { return s[:min(n, len(s))] }

// Counters drives adds and reads of a few counters from concurrent
// clients, each request through a random node, and records the history.
type Counters struct {
	History *CounterHistory
	names   []string
	cancel  context.CancelFunc
	done    sync.WaitGroup
}

// StartCounters starts clients on counters named run+"c0".. until Stop.
func (c *Cluster) StartCounters(clients, counters int) *Counters {
	ctx, cancel := context.WithCancel(context.Background())
	run := fmt.Sprintf("r%d", time.Now().UnixNano()%1e9)
	w := &Counters{History: NewCounterHistory(), cancel: cancel}
	for i := range counters {
		w.names = append(w.names, fmt.Sprintf("%sc%d", run, i))
	}
	for client := range clients {
		rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
		w.done.Go(func() {
			wait := errorPause
			for ctx.Err() == nil {
				op := CounterOp{Counter: w.names[rng.IntN(len(w.names))], Client: client, Add: rng.IntN(2) == 0, By: 1}
				node := c.Nodes[rng.IntN(len(c.Nodes))]
				op.Call = w.History.Now()
				value, err := counterRequest(ctx, node.URL, op)
				op.Return = w.History.Now()
				if err == nil {
					wait = errorPause
				} else {
					pause(ctx, wait)
					wait = min(2*wait, maxErrorPause)
				}
				if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, errNotDone) {
					// Never sent (the node is down), or refused before
					// the entity saw it: no operation.
					continue
				}
				// Unanswered, or cut by Stop: an add may still land.
				op.Value, op.Unknown = value, err != nil
				if err != nil {
					op.Err = failureKind(err)
				}
				w.History.Record(op)
			}
		})
	}
	return w
}

// Stop stops the clients and waits for their requests in flight.
func (w *Counters) Stop() {
	w.cancel()
	w.done.Wait()
}

// Names are the counters.
func (w *Counters) Names() []string { return w.names }

// failureKind names the kind of a failed request, for the log's tally.
func failureKind(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, errUnknown):
		return strings.TrimPrefix(err.Error(), errUnknown.Error()+": ")
	case errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection lost"
	}
	return "other"
}

func counterRequest(ctx context.Context, url string, op CounterOp) (int64, error) {
	method, target := http.MethodGet, url+"/counter/"+op.Counter
	if op.Add {
		method, target = http.MethodPost, fmt.Sprintf("%s/counter/%s/add?by=%d", url, op.Counter, op.By)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return 0, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusServiceUnavailable {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("%w: %s", errNotDone, resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("%w: %s", errUnknown, resp.Status)
	}
	var body struct {
		Value int64 `json:"value"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("%w: %w", errUnknown, err)
	}
	return body.Value, nil
}

// CheckCountersReachable fails the test unless every counter answers a
// read within bound.
func (c *Cluster) CheckCountersReachable(ctx context.Context, w *Counters, bound time.Duration) time.Duration {
	c.t.Helper()
	return c.checkReachable(ctx, w.names, bound, func(ctx context.Context, url, name string) bool {
		_, err := counterRequest(ctx, url, CounterOp{Counter: name})
		return err == nil
	})
}
