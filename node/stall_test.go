package node_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/internal/poll"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

// One node's connections to Postgres stall (a slow link, a proxy that
// stops forwarding; the database itself is fine) past its lease: that
// node fences itself, and only that node: the others' renewals ride
// connections of their own and never wait for it, so they keep their
// leases and serve on, and the stalled node's shards come back on them.
// (A stall of the database itself stops every node's renewals, and
// fences every node: TestPostgresStall in examples/payment/clustertest.)
func TestOneStalledConnectionFencesOnlyItsNode(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	proxy := newStallProxy(t, dsn)
	// 4 s leases, renewed every second, fenced 1 s early: a node fences
	// after 3 s without a renewal, so a healthy one on a busy test host
	// does not.
	timing := lease.Timing{Length: 4 * time.Second, RenewEvery: time.Second, Margin: time.Second}
	leases := func(c *node.Config) {
		c.Leases = lease.Settings{Node: timing, Coordinator: timing}
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	}
	settings := sharding.Settings{NumberOfShards: 10, MinMembers: 3}
	n1 := startNodeWith(t, dsn, "steady-1", nil, settings, leases)
	seeds := []string{n1.GossipAddr()}
	n2 := startNodeWith(t, dsn, "steady-2", seeds, settings, leases)
	n3 := startNodeWith(t, proxy.dsn, "stalled", seeds, settings, leases)
	nodes := []*testNode{n1, n2, n3}
	awaitUp(t, nodes)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%d", i)
		if err := apply(ctx, n1.ops, ids[i], "before"); err != nil {
			t.Fatal(err)
		}
	}

	proxy.stall()
	stalledAt := time.Now()
	poll.Within(t, time.Minute, "the stalled node fences itself", func() error {
		if err := n3.Alive(); !errors.Is(err, node.ErrFenced) {
			return fmt.Errorf("Alive: %v", err)
		}
		return nil
	})
	fencedAfter := time.Since(stalledAt)
	// Past the stalled node's lease in the database, and a lease more:
	// had the others waited for its connection, they would have fenced.
	time.Sleep(timing.Length)
	for _, n := range []*testNode{n1, n2} {
		if err := n.Alive(); err != nil {
			t.Fatalf("%s, whose connections never stalled, lost its lease %v after the other's stalled: %v", n.Self(), time.Since(stalledAt), err)
		}
	}
	for _, id := range ids {
		poll.Within(t, time.Minute, "every entity answers from the steady nodes", func() error {
			short, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return apply(short, n2.ops, id, "after")
		})
	}
	proxy.resume()
	t.Logf("the stalled node fenced itself %v after its connections stalled; the others kept their leases", fencedAfter.Round(time.Millisecond))
}

// stallProxy forwards loopback TCP to Postgres; while stalled it forwards
// nothing, keeping every connection open: the database, as this client
// sees it, stopped answering.
type stallProxy struct {
	dsn string

	mu      sync.Mutex
	stalled bool
	resumed *sync.Cond
}

func newStallProxy(t *testing.T, dsn string) *stallProxy {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	target := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = ln.Addr().String()
	p := &stallProxy{dsn: u.String()}
	p.resumed = sync.NewCond(&p.mu)
	var conns []net.Conn
	var connsMu sync.Mutex
	t.Cleanup(func() {
		p.resume()
		ln.Close()
		connsMu.Lock()
		defer connsMu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			connsMu.Lock()
			conns = append(conns, c, up)
			connsMu.Unlock()
			go p.pipe(up, c)
			go p.pipe(c, up)
		}
	}()
	return p
}

// pipe copies from src to dst, holding each chunk while stalled.
func (p *stallProxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stalled {
				p.resumed.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a closed connection
			return
		}
	}
}

func (p *stallProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

func (p *stallProxy) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = false
	p.resumed.Broadcast()
}
