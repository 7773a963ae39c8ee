package tcp_test

import (
	"crypto/tls"
	"errors"
	"slices"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/internal/testcert"
)

// withTLS returns a tune that gives a node server and client configs.
func withTLS(server, client *tls.Config) func(*tcp.Config) {
	return func(c *tcp.Config) { c.ServerTLS, c.ClientTLS = server, client }
}

func TestMutualTLS(t *testing.T) {
	ca := testcert.New(t, "shoal test CA")

	t.Run("nodes with certificates of the cluster's CA talk", func(t *testing.T) {
		nw := newNetwork(t, pingRegistry(), nil)
		nw.tune = withTLS(tcp.MutualTLS(ca.Leaf(t, "b"), ca.Pool))
		got := newRecorder()
		b := nw.start(t, addr("b", 1), got.handle, "")
		nw.tune = withTLS(tcp.MutualTLS(ca.Leaf(t, "a"), ca.Pool))
		a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
		for i := 1; i <= 3; i++ {
			sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: i})
		}
		flush(t, a, b.Self())
		if seqs := got.from("a"); !slices.Equal(seqs, []int{1, 2, 3}) {
			t.Fatalf("received %v over TLS, want [1 2 3]", seqs)
		}
	})

	other := testcert.New(t, "another cluster's CA")
	refused := []struct {
		name string
		a    func(*tcp.Config) // the dialler's settings
	}{
		{"a certificate of another CA", withTLS(tcp.MutualTLS(other.Leaf(t, "a"), other.Pool))},
		{"a node that trusts another CA", withTLS(tcp.MutualTLS(ca.Leaf(t, "a"), other.Pool))},
		{"no client certificate", func(c *tcp.Config) {
			server, _ := tcp.MutualTLS(ca.Leaf(t, "a"), ca.Pool)
			c.ServerTLS, c.ClientTLS = server, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.Pool}
		}},
		{"plaintext", nil},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			nw := newNetwork(t, pingRegistry(), nil)
			nw.tune = withTLS(tcp.MutualTLS(ca.Leaf(t, "b"), ca.Pool))
			got := newRecorder()
			b := nw.start(t, addr("b", 1), got.handle, "")
			nw.tune = tc.a
			a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
			if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
				t.Fatalf("Send: %v", err)
			}
			eventually(t, "b refusing a's handshake twice (a redials)", func() bool { return b.Stats().RefusedHandshakes >= 2 })
			if n := got.total(); n != 0 || b.Stats().Delivered != 0 {
				t.Fatalf("b received %d messages from a refused node", n)
			}
			if a.Stats().Dials != 0 {
				t.Errorf("a counts %d established connections to a node that refuses it", a.Stats().Dials)
			}
		})
	}

	t.Run("refused: TLS to a plaintext node", func(t *testing.T) {
		nw := newNetwork(t, pingRegistry(), nil)
		got := newRecorder()
		b := nw.start(t, addr("b", 1), got.handle, "")
		nw.tune = withTLS(tcp.MutualTLS(ca.Leaf(t, "a"), ca.Pool))
		a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
		if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		eventually(t, "b refusing a's handshake twice", func() bool { return b.Stats().RefusedHandshakes >= 2 })
		if n := got.total(); n != 0 {
			t.Fatalf("b received %d messages", n)
		}
	})
}

func TestListenRefusesHalfATLSConfig(t *testing.T) {
	server, _ := tcp.MutualTLS(tls.Certificate{}, nil)
	_, err := tcp.Listen(tcp.Config{
		Self: addr("a", 1), Codec: pingRegistry(), Handler: func(cluster.UniqueAddress, any) {},
		Resolve: newDirectory().resolve, ListenAddr: "127.0.0.1:0", ServerTLS: server,
	})
	if !errors.Is(err, cluster.ErrInvalidConfig) {
		t.Fatalf("Listen with ServerTLS alone: %v, want ErrInvalidConfig", err)
	}
}

// With TLS on, a certificate binds its node id by default: a node whose
// valid certificate names another node is refused, whichever end it is,
// unless both ends set AllowAnyNodeCert.
func TestCertNamesNode(t *testing.T) {
	ca := testcert.New(t, "shoal test CA")
	node := func(certName string, anyCert bool) func(*tcp.Config) {
		return func(c *tcp.Config) {
			c.ServerTLS, c.ClientTLS = tcp.MutualTLS(ca.Leaf(t, certName), ca.Pool)
			c.AllowAnyNodeCert = anyCert
		}
	}
	for _, tc := range []struct {
		name          string
		aCert, bCert  string
		anyCert       bool
		wantDelivered bool
	}{
		{"each certificate names its node", "a", "b", false, true},
		{"the dialler's certificate names another node", "x", "b", false, false},
		{"the listener's certificate names another node", "a", "x", false, false},
		{"a shared certificate with AllowAnyNodeCert", "x", "x", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nw := newNetwork(t, pingRegistry(), node(tc.bCert, tc.anyCert))
			got := newRecorder()
			b := nw.start(t, addr("b", 1), got.handle, "")
			nw.tune = node(tc.aCert, tc.anyCert)
			a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
			if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
				t.Fatalf("Send: %v", err)
			}
			if tc.wantDelivered {
				flush(t, a, b.Self())
				if seqs := got.from("a"); !slices.Equal(seqs, []int{1}) {
					t.Fatalf("received %v, want [1]", seqs)
				}
				return
			}
			eventually(t, "b refusing a's handshake twice", func() bool { return b.Stats().RefusedHandshakes >= 2 })
			if n := got.total(); n != 0 || a.Stats().Dials != 0 {
				t.Fatalf("delivered %d, dials %d: the misnamed node got through", n, a.Stats().Dials)
			}
		})
	}
}
