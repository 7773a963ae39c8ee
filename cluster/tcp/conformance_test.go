package tcp_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/testcert"
)

// deadline bounds every wait of these tests: generous, for a busy machine.
const deadline = 30 * time.Second

// directory is the tests' membership: where each node's latest
// incarnation listens, and which incarnations are gone.
type directory struct {
	mu     sync.Mutex
	latest map[string]entry
}

type entry struct {
	addr     cluster.UniqueAddress
	endpoint string
	down     bool
}

func newDirectory() *directory { return &directory{latest: make(map[string]entry)} }

func (d *directory) set(a cluster.UniqueAddress, endpoint string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.latest[a.Node] = entry{addr: a, endpoint: endpoint}
}

func (d *directory) markDown(a cluster.UniqueAddress) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.latest[a.Node]; ok && e.addr == a {
		e.down = true
		d.latest[a.Node] = e
	}
}

func (d *directory) resolve(to cluster.UniqueAddress) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.latest[to.Node]
	switch {
	case !ok || to.Incarnation > e.addr.Incarnation:
		return "", fmt.Errorf("%s unknown: %w", to, cluster.ErrUnreachable)
	case to.Incarnation < e.addr.Incarnation || e.down:
		return "", fmt.Errorf("%s gone: %w", to, cluster.ErrStaleIncarnation)
	}
	return e.endpoint, nil
}

// network starts transports on 127.0.0.1 that find each other through one
// directory.
type network struct {
	t        testing.TB
	reg      *codec.Registry
	dir      *directory
	capacity int
	maxFrame int
	tune     func(*tcp.Config)

	mu    sync.Mutex
	nodes []*tcp.Transport
}

func newNetwork(t testing.TB, reg *codec.Registry, tune func(*tcp.Config)) *network {
	return &network{t: t, reg: reg, dir: newDirectory(), capacity: 64, maxFrame: 4096, tune: tune}
}

// start listens on listenAddr (127.0.0.1:0 when empty) as a.
func (n *network) start(t testing.TB, a cluster.UniqueAddress, h cluster.Handler, listenAddr string) *tcp.Transport {
	t.Helper()
	if listenAddr == "" {
		listenAddr = "127.0.0.1:0"
	}
	cfg := tcp.Config{
		Self: a, Codec: n.reg, Handler: h, Resolve: n.dir.resolve, ListenAddr: listenAddr,
		ClusterName: "test", QueueCapacity: n.capacity, MaxFrameSize: n.maxFrame,
		MinBackoff: time.Millisecond, MaxBackoff: 50 * time.Millisecond,
	}
	if n.tune != nil {
		n.tune(&cfg)
	}
	tr, err := tcp.Listen(cfg)
	if err != nil {
		t.Fatalf("Listen %s: %v", a, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		if err := tr.Close(ctx); err != nil {
			t.Errorf("Close %s: %v", a, err)
		}
	})
	n.dir.set(a, tr.Addr().String())
	n.mu.Lock()
	n.nodes = append(n.nodes, tr)
	n.mu.Unlock()
	return tr
}

func (n *network) transports() []*tcp.Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*tcp.Transport(nil), n.nodes...)
}

// harness adapts a network to clustertest.Harness.
type harness struct{ *network }

// closeHook is a transport whose Close also marks it down in the
// directory, as membership would.
type closeHook struct {
	*tcp.Transport
	dir *directory
}

func (c closeHook) Close(ctx context.Context) error {
	c.dir.markDown(c.Self())
	return c.Transport.Close(ctx)
}

func (h harness) Start(t *testing.T, a cluster.UniqueAddress, handle cluster.Handler) cluster.Transport {
	return closeHook{h.start(t, a, handle, ""), h.dir}
}

func (h harness) Settle(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for _, tr := range h.transports() {
		if err := tr.FlushAll(ctx); err != nil && !errors.Is(err, cluster.ErrClosed) {
			t.Fatalf("Settle: flush %s: %v", tr.Self(), err)
		}
	}
}

func (h harness) find(a cluster.UniqueAddress) *tcp.Transport {
	for _, tr := range h.transports() {
		if tr.Self() == a {
			return tr
		}
	}
	h.t.Fatalf("no transport %s", a)
	return nil
}

func (h harness) Hold(from, to cluster.UniqueAddress) {
	if err := h.find(from).HoldLink(to); err != nil {
		h.t.Fatalf("Hold %s → %s: %v", from, to, err)
	}
}

func (h harness) Release(from, to cluster.UniqueAddress) { h.find(from).ReleaseLink(to) }

// Break closes the connections between a and b and loses what their
// links queued, as the suite expects of a break.
func (h harness) Break(a, b string) {
	for _, tr := range h.transports() {
		switch tr.Self().Node {
		case a:
			tr.BreakConns(b, true)
		case b:
			tr.BreakConns(a, true)
		}
	}
}

func (h harness) QueueCapacity() int { return h.capacity }
func (h harness) MaxFrameSize() int  { return h.maxFrame }

func TestTransportConformance(t *testing.T) {
	t.Run("plaintext", func(t *testing.T) {
		clustertest.RunTransport(t, func(t *testing.T, reg *codec.Registry) clustertest.Harness {
			return harness{newNetwork(t, reg, nil)}
		})
	})
	t.Run("mutual TLS", func(t *testing.T) {
		ca := testcert.New(t, "shoal test CA")
		certs := make(map[string]tls.Certificate) // one per node id, as nodes must have
		var mu sync.Mutex
		nodeCert := func(c *tcp.Config) {
			mu.Lock()
			defer mu.Unlock()
			cert, ok := certs[c.Self.Node]
			if !ok {
				cert = ca.Leaf(t, c.Self.Node)
				certs[c.Self.Node] = cert
			}
			c.ServerTLS, c.ClientTLS = tcp.MutualTLS(cert, ca.Pool)
		}
		clustertest.RunTransport(t, func(t *testing.T, reg *codec.Registry) clustertest.Harness {
			return harness{newNetwork(t, reg, nodeCert)}
		})
	})
}
