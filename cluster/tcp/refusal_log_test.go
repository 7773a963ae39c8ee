package tcp_test

import (
	"crypto/tls"
	"log/slog"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/clustertest"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/internal/logtest"
	"github.com/shoal-dev/shoal/internal/testcert"
)

// A refused handshake is logged on both sides with its reason said once:
// no "tcp: handshake with …: tcp: handshake refused …", no "tls: … tls:".
func TestRefusalsAreLoggedWithoutADoubledPrefix(t *testing.T) {
	ca := testcert.New(t, "refusal log CA")
	for _, tc := range []struct {
		name   string
		b, a   func(*tcp.Config)
		reason string
	}{
		{"another cluster", nil, func(c *tcp.Config) { c.ClusterName = "other" }, `cluster "other"`},
		{"no client certificate", withTLS(tcp.MutualTLS(ca.Leaf(t, "b"), ca.Pool)), func(c *tcp.Config) {
			server, _ := tcp.MutualTLS(ca.Leaf(t, "a"), ca.Pool)
			c.ServerTLS, c.ClientTLS = server, &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: ca.Pool}
		}, "certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logged logtest.Buffer
			logger := slog.New(slog.NewJSONHandler(&logged, nil))
			nw := newNetwork(t, pingRegistry(), nil)
			nw.tune = func(c *tcp.Config) {
				c.Logger = logger.With("side", "b")
				if tc.b != nil {
					tc.b(c)
				}
			}
			b := nw.start(t, addr("b", 1), func(cluster.UniqueAddress, any) {}, "")
			nw.tune = func(c *tcp.Config) {
				c.Logger = logger.With("side", "a")
				tc.a(c)
			}
			a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
			if err := a.Send(b.Self(), clustertest.Ping{Sender: "a", Seq: 1}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "b refusing a's handshake", func() bool { return b.Stats().RefusedHandshakes >= 2 })
			var errs []string
			for _, r := range logged.Records(t) {
				if e, ok := r["err"].(string); ok && strings.Contains(e, "refused") {
					errs = append(errs, e)
				}
			}
			if len(errs) == 0 {
				t.Fatal("no refusal logged")
			}
			for _, e := range errs {
				if strings.Count(e, "tcp: ") > 1 || strings.Count(e, "tls: ") > 1 || !strings.Contains(e, tc.reason) {
					t.Errorf("logged %q: a doubled prefix, or no %q", e, tc.reason)
				}
			}
		})
	}
}
