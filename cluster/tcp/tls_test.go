package tcp_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newCA(t testing.TB, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// leaf issues a node certificate for 127.0.0.1, good as server and client.
func (ca *testCA) leaf(t testing.TB, node string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: node},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{node},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// withTLS returns a tune that gives a node server and client configs.
func withTLS(server, client *tls.Config) func(*tcp.Config) {
	return func(c *tcp.Config) { c.ServerTLS, c.ClientTLS = server, client }
}

func TestMutualTLS(t *testing.T) {
	ca := newCA(t, "shoal test CA")

	t.Run("nodes with certificates of the cluster's CA talk", func(t *testing.T) {
		nw := newNetwork(t, pingRegistry(), nil)
		nw.tune = withTLS(tcp.MutualTLS(ca.leaf(t, "b"), ca.pool))
		got := newRecorder()
		b := nw.start(t, addr("b", 1), got.handle, "")
		nw.tune = withTLS(tcp.MutualTLS(ca.leaf(t, "a"), ca.pool))
		a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
		for i := 1; i <= 3; i++ {
			sendOrFlush(t, a, b.Self(), clustertest.Ping{Sender: "a", Seq: i})
		}
		flush(t, a, b.Self())
		if seqs := got.from("a"); !slices.Equal(seqs, []int{1, 2, 3}) {
			t.Fatalf("received %v over TLS, want [1 2 3]", seqs)
		}
	})

	other := newCA(t, "another cluster's CA")
	refused := []struct {
		name string
		a    func(*tcp.Config) // the dialler's settings
	}{
		{"a certificate of another CA", withTLS(tcp.MutualTLS(other.leaf(t, "a"), other.pool))},
		{"a node that trusts another CA", withTLS(tcp.MutualTLS(ca.leaf(t, "a"), other.pool))},
		{"no client certificate", func(c *tcp.Config) {
			server, _ := tcp.MutualTLS(ca.leaf(t, "a"), ca.pool)
			c.ServerTLS, c.ClientTLS = server, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.pool}
		}},
		{"plaintext", nil},
	}
	for _, tc := range refused {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			nw := newNetwork(t, pingRegistry(), nil)
			nw.tune = withTLS(tcp.MutualTLS(ca.leaf(t, "b"), ca.pool))
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
		nw.tune = withTLS(tcp.MutualTLS(ca.leaf(t, "a"), ca.pool))
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
	ca := newCA(t, "shoal test CA")
	node := func(certName string, anyCert bool) func(*tcp.Config) {
		return func(c *tcp.Config) {
			c.ServerTLS, c.ClientTLS = tcp.MutualTLS(ca.leaf(t, certName), ca.pool)
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
