package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster/lease"
	leasepg "github.com/shoal-dev/shoal/cluster/lease/postgres"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/internal/poll"
	"github.com/shoal-dev/shoal/internal/testcert"
	"github.com/shoal-dev/shoal/node"
)

// Cluster flags: every refusal is a *FlagError naming the flag, wrapping
// ErrInvalidFlags (and the cause, when there is one).
func TestClusterFlagsRefused(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	ca := testcert.New(t, "flags")
	certPEM, keyPEM := testcert.PEM(t, ca.Leaf(t, "a"))
	certFile, keyFile := filepath.Join(dir, "a.crt"), filepath.Join(dir, "a.key")
	writeFile(t, certFile, certPEM)
	writeFile(t, keyFile, keyPEM)

	cl := []string{"-node-id", "a", "-postgres", "postgres://x@127.0.0.1/db"}
	for _, tc := range []struct {
		name  string
		args  []string
		flag  string
		cause error
	}{
		{"seeds without a node id", []string{"-seeds", "127.0.0.1:7946", "-postgres", "postgres://x"}, "node-id", nil},
		{"node id without postgres", []string{"-node-id", "a"}, "postgres", nil},
		{"node id with a slash", []string{"-node-id", "a/b", "-postgres", "postgres://x"}, "node-id", nil},
		{"seed not host:port", append(cl, "-seeds", "127.0.0.1"), "seeds", nil},
		{"seed on port 0", append(cl, "-seeds", "127.0.0.1:7946,127.0.0.1:0"), "seeds", nil},
		{"seed without a host", append(cl, "-seeds", ":7946"), "seeds", nil},
		{"empty seed list", append(cl, "-seeds", " , "), "seeds", nil},
		{"gossip on a wildcard, not advertised", append(cl, "-gossip-addr", "0.0.0.0:7946"), "gossip-addr", nil},
		{"gossip advertises a wildcard", append(cl, "-gossip-addr", "0.0.0.0:7946", "-gossip-advertise", "0.0.0.0:7946"), "gossip-advertise", nil},
		{"transport on every interface, not advertised", append(cl, "-transport-addr", ":7947"), "transport-addr", nil},
		{"transport port out of range", append(cl, "-transport-addr", "127.0.0.1:70000"), "transport-addr", nil},
		{"transport advertised on port 0", append(cl, "-transport-addr", "0.0.0.0:7947", "-transport-advertise", "node-a:0"), "transport-advertise", nil},
		{"certificate without key and CA", append(cl, "-tls-cert", certFile), "tls-key", nil},
		{"certificate and key without CA", append(cl, "-tls-cert", certFile, "-tls-key", keyFile), "tls-ca", nil},
		{"certificate file missing", append(cl, "-tls-cert", missing, "-tls-key", keyFile, "-tls-ca", notPEM), "tls-cert", fs.ErrNotExist},
		{"key does not match", append(cl, "-tls-cert", certFile, "-tls-key", certFile, "-tls-ca", notPEM), "tls-cert", nil},
		{"CA file missing", append(cl, "-tls-cert", certFile, "-tls-key", keyFile, "-tls-ca", missing), "tls-ca", fs.ErrNotExist},
		{"CA file without a certificate", append(cl, "-tls-cert", certFile, "-tls-key", keyFile, "-tls-ca", notPEM), "tls-ca", nil},
		{"min members 0", append(cl, "-min-members", "0"), "min-members", nil},
		{"gossip key not base64", append(cl, "-gossip-key", "not base64!"), "gossip-key", nil},
		{"gossip key of 20 bytes", append(cl, "-gossip-key", base64.StdEncoding.EncodeToString(make([]byte, 20))), "gossip-key", nil},
		{"admin address not host:port", append(cl, "-admin-addr", "9001"), "admin-addr", nil},
		{"admin reads protected without a token", append(cl, "-admin-addr", "127.0.0.1:0", "-admin-reads-need-token"), "admin-reads-need-token", nil},
		{"admin address without a node id", []string{"-admin-addr", "127.0.0.1:9001", "-postgres", "postgres://x"}, "node-id", nil},
		{"lease too short to renew", append(cl, "-lease", "500ms"), "lease", nil},
		{"unknown gossip timing", append(cl, "-gossip-timing", "wan"), "gossip-timing", nil},
		{"demo on a cluster", append(cl, "-demo"), "demo", nil},
		{"issuer only on a cluster", append(cl, "-issuer-only"), "issuer-only", nil},
		{"issuer hang amount without issuer only", []string{"-issuer-hang-amount", "777"}, "issuer-hang-amount", nil},
		{"issuer hang amount negative", []string{"-issuer-only", "-issuer-hang-amount", "-1"}, "issuer-hang-amount", nil},
		{"a stray argument", []string{"-postgres", "postgres://x", "cluster"}, "", nil},
		{"postgres given no DSN", []string{"-postgres", "-node-id", "n2"}, "postgres", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseArgs(tc.args, io.Discard)
			var fe *FlagError
			if !errors.As(err, &fe) || !errors.Is(err, ErrInvalidFlags) {
				t.Fatalf("parseArgs(%q): %v, want a *FlagError", tc.args, err)
			}
			if fe.Flag != tc.flag {
				t.Fatalf("parseArgs(%q): %v: names -%s, want -%s", tc.args, err, fe.Flag, tc.flag)
			}
			if tc.cause != nil && !errors.Is(err, tc.cause) {
				t.Fatalf("parseArgs(%q): %v, want it to wrap %v", tc.args, err, tc.cause)
			}
			if secret := tc.args[len(tc.args)-1]; tc.flag == "gossip-key" && strings.Contains(err.Error(), secret) {
				t.Fatalf("the refusal %q shows the key", err)
			}
		})
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// Without cluster flags the program is the single node it always was;
// with them, the flags land in the node's config.
func TestClusterFlagsAccepted(t *testing.T) {
	o, err := parseArgs([]string{"-postgres", "postgres://x"}, io.Discard)
	if err != nil || o.cfg.Cluster != nil {
		t.Fatalf("no cluster flags: cluster %+v, %v; want a node of its own", o.cfg.Cluster, err)
	}
	o, err = parseArgs(nil, io.Discard)
	if err != nil || o.cfg.Cluster != nil || o.cfg.PostgresDSN != "" {
		t.Fatalf("no flags: %+v, %v; want the in-memory single node", o.cfg, err)
	}

	o, err = parseArgs([]string{
		"-node-id", "payment2", "-postgres", "postgres://u:p@db:5432/payment",
		"-seeds", "payment1:7946, payment3:7946", "-bootstrap", "-cluster-name", "payments",
		"-gossip-addr", "0.0.0.0:7946", "-gossip-advertise", "payment2:7946",
		"-transport-addr", "0.0.0.0:7947", "-transport-advertise", "payment2:7947",
		"-min-members", "2", "-join-timeout", "30s",
		"-admin-addr", "0.0.0.0:9001", "-admin-token", "tok", "-admin-reads-need-token",
		"-app-version", "2.1.0",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg.Cluster
	if c == nil {
		t.Fatal("cluster flags gave no cluster")
	}
	nc := c.Node
	if nc.NodeID != "payment2" || nc.PostgresDSN != "postgres://u:p@db:5432/payment" || nc.ClusterName != "payments" ||
		!slices.Equal(nc.Seeds, []string{"payment1:7946", "payment3:7946"}) ||
		nc.GossipAddr != "0.0.0.0:7946" || nc.GossipAdvertise != "payment2:7946" ||
		nc.TransportAddr != "0.0.0.0:7947" || nc.TransportAdvertise != "payment2:7947" ||
		nc.ServerTLS != nil || !c.Bootstrap || c.MinMembers != 2 || c.JoinTimeout != 30*time.Second ||
		nc.AdminAddr != "0.0.0.0:9001" || nc.AdminToken != "tok" || !nc.AdminReadsNeedToken ||
		nc.AppVersion != "2.1.0" {
		t.Fatalf("cluster config: %+v", c)
	}

	// The token may come from the environment.
	t.Setenv("SHOAL_ADMIN_TOKEN", "from-env")
	o, err = parseArgs([]string{"-node-id", "n1", "-postgres", "postgres://x", "-admin-addr", "127.0.0.1:0"}, io.Discard)
	if err != nil || o.cfg.Cluster.Node.AdminToken != "from-env" || o.cfg.Cluster.Node.AdminAddr != "127.0.0.1:0" {
		t.Fatalf("admin token from $SHOAL_ADMIN_TOKEN: %+v, %v", o.cfg.Cluster, err)
	}
	t.Setenv("SHOAL_ADMIN_TOKEN", "")

	// The gossip key: base64 of 32 bytes, from the flag or the environment.
	key := make([]byte, 32)
	key[0], key[31] = 7, 9
	o, err = parseArgs([]string{"-node-id", "n1", "-postgres", "postgres://x", "-gossip-key", base64.StdEncoding.EncodeToString(key)}, io.Discard)
	if err != nil || !bytes.Equal(o.cfg.Cluster.Node.SecretKey, key) {
		t.Fatalf("-gossip-key: %v, %v", o.cfg.Cluster, err)
	}
	t.Setenv("SHOAL_GOSSIP_KEY", base64.StdEncoding.EncodeToString(key[:16]))
	o, err = parseArgs([]string{"-node-id", "n1", "-postgres", "postgres://x"}, io.Discard)
	if err != nil || !bytes.Equal(o.cfg.Cluster.Node.SecretKey, key[:16]) {
		t.Fatalf("gossip key from $SHOAL_GOSSIP_KEY: %v, %v", o.cfg.Cluster, err)
	}
	t.Setenv("SHOAL_GOSSIP_KEY", "")

	// A node id alone: loopback on free ports, the node package's defaults.
	o, err = parseArgs([]string{"-node-id", "n1", "-postgres", "postgres://x"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := node.DefaultConfig("n1"); o.cfg.Cluster.Node.GossipAddr != d.GossipAddr || o.cfg.Cluster.Node.TransportAddr != d.TransportAddr ||
		o.cfg.Cluster.Node.ClusterName != d.ClusterName || len(o.cfg.Cluster.Node.Seeds) != 0 || o.cfg.Cluster.Node.AdminAddr != "" {
		t.Fatalf("defaults: %+v", o.cfg.Cluster.Node)
	}
}

// The probes answer 200 while the check passes and 503 with the reason
// otherwise; a node of its own is always up while it listens.
func TestProbes(t *testing.T) {
	api := &API{
		Ready:   func() error { return fmt.Errorf("%w: joining", node.ErrNotJoined) },
		Members: func() []string { return []string{"a#1(Joining, order 0)"} },
	}
	h := api.Handler()
	for _, tc := range []struct {
		path   string
		status int
		body   string
	}{
		{"/ready", 503, `{"status":"down","reason":"node: not joined: joining","members":["a#1(Joining, order 0)"]}`},
		{"/alive", 200, `{"status":"up"}`},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tc.path, nil))
		if rec.Code != tc.status || strings.TrimSpace(rec.Body.String()) != tc.body {
			t.Fatalf("GET %s: %d %s, want %d %s", tc.path, rec.Code, rec.Body, tc.status, tc.body)
		}
	}
	n := startNode(t, nil)
	if err := probeURL(context.Background(), n.APIURL+"/ready"); err != nil {
		t.Fatalf("single node /ready: %v", err)
	}
	if err := probeURL(context.Background(), n.APIURL+"/alive"); err != nil {
		t.Fatalf("single node /alive: %v", err)
	}
	if err := probeURL(context.Background(), n.APIURL+"/nope"); err == nil {
		t.Fatal("-probe of a 404 succeeded")
	}
}

// clusterTiming is fast gossip with a lenient failure detector, so that a
// node starved of CPU (the race detector, a busy machine) is not declared
// failed.
func clusterTiming() memberlist.Timing {
	t := memberlist.FastTiming()
	t.ProbeInterval, t.ProbeTimeout = time.Second, 500*time.Millisecond
	t.SuspicionMult, t.SuspicionMaxTimeoutMult = 4, 6
	t.TCPTimeout = 5 * time.Second
	return t
}

// startPaymentNode starts a clustered payment node from command-line
// flags (as the program does), with test timing and the given issuer.
func startPaymentNode(t *testing.T, issuerURL string, minMembers int, args ...string) *Node {
	t.Helper()
	o, err := parseArgs(args, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg.Cluster
	c.Node.Timing = clusterTiming()
	// Longer leases than the 2 s default, which fence a node after 1.5 s
	// without a renewal: beside other test binaries on a busy machine a
	// renewal can wait that long, and this test is not about the lease.
	t8 := lease.Timing{Length: 8 * time.Second, RenewEvery: 500 * time.Millisecond, Margin: 2 * time.Second}
	c.Node.Leases = lease.Settings{Node: t8, Coordinator: t8}
	c.MinMembers = minMembers
	return startNode(t, func(cfg *Config) {
		cfg.Cluster = c
		cfg.PostgresDSN = o.cfg.PostgresDSN
		cfg.IssuerURL = issuerURL
		cfg.Sequences = nil // Postgres sequences, shared by the nodes
	})
}

// awaitReady waits until every node's /ready answers 200.
func awaitReady(t *testing.T, nodes ...*Node) {
	t.Helper()
	for _, n := range nodes {
		poll.Within(t, 30*time.Second, n.APIURL+" ready", func() error { return probeURL(context.Background(), n.APIURL+"/ready") })
	}
}

// Three clustered payment nodes in one process, over loopback and under
// mutual TLS, on a real Postgres, with one issuer: orders are settled and
// canceled through the APIs of different nodes, each request reaching the
// order's entity wherever its shard lives; then the oldest node (the
// coordinator's) shuts down gracefully, and every order still answers
// through the other two from its stored state, with no second issuer call.
func TestClusterOfThree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and three nodes")
	}
	dsn := pg.MigratedDSN(t)
	sim := NewSimulator()
	issuer := httptest.NewServer(sim)
	t.Cleanup(issuer.Close)
	t.Cleanup(sim.Close)

	dir := t.TempDir()
	ca := testcert.New(t, "payment-cluster")
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.CertPEM())
	flagsOf := func(id string, seeds ...string) []string {
		certPEM, keyPEM := testcert.PEM(t, ca.Leaf(t, id))
		writeFile(t, filepath.Join(dir, id+".crt"), certPEM)
		writeFile(t, filepath.Join(dir, id+".key"), keyPEM)
		args := []string{"-node-id", id, "-postgres", dsn, "-cluster-name", "payments",
			"-tls-cert", filepath.Join(dir, id+".crt"), "-tls-key", filepath.Join(dir, id+".key"), "-tls-ca", filepath.Join(dir, "ca.pem")}
		if len(seeds) > 0 {
			args = append(args, "-seeds", strings.Join(seeds, ","))
		}
		return args
	}
	n1 := startPaymentNode(t, issuer.URL, 3, flagsOf("pay-1")...)
	seed := n1.Cluster.GossipAddr()
	n2 := startPaymentNode(t, issuer.URL, 3, flagsOf("pay-2", seed)...)
	n3 := startPaymentNode(t, issuer.URL, 3, flagsOf("pay-3", seed)...)
	nodes := []*Node{n1, n2, n3}
	awaitReady(t, nodes...)
	// Ready means joined; each node's view learns of the others by gossip,
	// and only once the transport admits them (docs/DESIGN.md, 'Members
	// and views'), so every view reaches three Up a little later.
	for _, n := range nodes {
		poll.Within(t, 15*time.Second, n.APIURL+" lists 3 members Up", func() error {
			if up := upMembers(t, n); len(up) != 3 {
				return fmt.Errorf("%d members Up: %v", len(up), up)
			}
			return nil
		})
	}

	const orders = 30
	path := func(i int, what string) string { return fmt.Sprintf("shop-1/cl%02d/%s", i, what) }
	canceled := func(i int) bool { return i%2 == 0 }
	for i := range orders {
		put(t, nodes[i%3], "example", "dummy", path(i, "payment"), amount1000).want(t, 200, "")
		put(t, nodes[(i+1)%3], "example", "dummy", path(i, "payment"), amount1000).want(t, 200, "")
		if canceled(i) {
			put(t, nodes[(i+2)%3], "example", "dummy", path(i, "cancel"), "").want(t, 200, "")
		}
	}
	auths, revs := countMTIs(sim.Received())
	if auths != orders || revs != (orders+1)/2 {
		t.Fatalf("issuer received %d authorizations and %d reversals, want %d and %d", auths, revs, orders, (orders+1)/2)
	}

	// Every node hosts shards, and some orders live on the leaver.
	gone, stay := n1, []*Node{n2, n3}
	onGone := 0
	for _, n := range nodes {
		if len(n.Payments.State().Shards) == 0 {
			t.Fatalf("%s hosts no shard", n.Cluster.Self())
		}
	}
	goneShards := gone.Payments.State().Shards
	for i := range orders {
		id := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: fmt.Sprintf("cl%02d", i)}.EntityID()
		if _, ok := goneShards[gone.Payments.ShardID(id)]; ok {
			onGone++
		}
	}
	if onGone == 0 {
		t.Fatal("no order lives on the node that leaves")
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := gone.Shutdown(ctx); err != nil {
		t.Fatalf("graceful shutdown of %s: %v", gone.Cluster.Self(), err)
	}
	if err := gone.Cluster.Alive(); !errors.Is(err, node.ErrShuttingDown) {
		t.Fatalf("Alive after Shutdown: %v", err)
	}
	if _, err := http.Get(gone.APIURL + "/ready"); err == nil {
		t.Fatal("the API of the node that left still answers")
	}

	// Each order answers through both remaining nodes from its state: a
	// settled one settles again (200), a canceled one cancels again (200)
	// and refuses a settle (400 CODE-003).
	for i := range orders {
		for k, via := range stay {
			if canceled(i) {
				put(t, via, "example", "dummy", path(i, "cancel"), "").want(t, 200, "")
				if k == 0 {
					put(t, via, "example", "dummy", path(i, "payment"), amount1000).want(t, 400, CodeValidation)
				}
			} else {
				put(t, via, "example", "dummy", path(i, "payment"), amount1000).want(t, 200, "")
			}
		}
	}
	if a, r := countMTIs(sim.Received()); a != auths || r != revs {
		t.Fatalf("after the leave the issuer received %d authorizations and %d reversals, want still %d and %d", a, r, auths, revs)
	}
	for _, n := range stay {
		poll.Within(t, 30*time.Second, n.APIURL+" sees the leaver gone", func() error {
			if up := upMembers(t, n); len(up) != 2 || slices.ContainsFunc(up, func(m string) bool { return strings.HasPrefix(m, "pay-1#") }) {
				return fmt.Errorf("/ready lists as Up %v, want the two others", up)
			}
			return nil
		})
	}
	t.Logf("%d of %d orders lived on %s before it left", onGone, orders, gone.Cluster.Self())
	for _, n := range slices.Backward(stay) {
		if err := n.Shutdown(ctx); err != nil {
			t.Fatalf("shutdown of %s: %v", n.Cluster.Self(), err)
		}
	}
}

// upMembers are the members /ready of n lists as Up; the node must be ready.
func upMembers(t *testing.T, n *Node) []string {
	t.Helper()
	resp, err := http.Get(n.APIURL + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body probeBody
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s/ready: %s %+v %v", n.APIURL, resp.Status, body, err)
	}
	var up []string
	for _, m := range body.Members {
		if strings.Contains(m, "(Up,") {
			up = append(up, m)
		}
	}
	return up
}

func countMTIs(reqs []IssuerRequest) (auths, reversals int) {
	for _, r := range reqs {
		switch r.MTI {
		case MTIAuthorization:
			auths++
		case MTIReversal:
			reversals++
		}
	}
	return auths, reversals
}

// A node whose seeds do not answer retries them until -join-timeout and
// fails with memberlist.ErrNoSeedReachable; with -bootstrap it starts a
// new cluster instead.
func TestClusterSeedsUnreachable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dsn := pg.MigratedDSN(t)
	dead := deadAddr(t)
	o, err := parseArgs([]string{"-node-id", "lonely", "-postgres", dsn, "-seeds", dead, "-join-timeout", "1ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.cfg.Cluster.Node.Timing = clusterTiming()
	o.cfg.Logger = quietLogger()
	o.cfg.IssuerURL = "http://127.0.0.1:1/payment" // never called
	if n, err := Start(context.Background(), o.cfg); !errors.Is(err, memberlist.ErrNoSeedReachable) {
		if n != nil {
			n.Kill()
		}
		t.Fatalf("start without -bootstrap: %v, want memberlist.ErrNoSeedReachable", err)
	}

	o.cfg.Cluster.Bootstrap = true
	n, err := Start(context.Background(), o.cfg)
	if err != nil {
		t.Fatalf("start with -bootstrap: %v", err)
	}
	t.Cleanup(n.Kill)
	awaitReady(t, n)
}

// deadAddr is a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// The -probe check the compose file uses as its health check.
func TestProbeFlag(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ready" {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(probeBody{Status: "up"})
	}))
	defer up.Close()
	if err := run(nil, []string{"-probe", up.URL + "/ready"}, io.Discard, io.Discard); err != nil {
		t.Fatalf("-probe of a ready node: %v", err)
	}
	if err := run(nil, []string{"-probe", up.URL + "/alive"}, io.Discard, io.Discard); err == nil {
		t.Fatal("-probe of a 503 succeeded")
	}
}

// A node downed in the database fences itself: /alive turns 503 and Err
// reports node.ErrFenced, on which the program exits 1 so that its
// supervisor restarts it as a new incarnation.
func TestClusterNodeFencedReportsOnErr(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dsn := pg.MigratedDSN(t)
	o, err := parseArgs([]string{"-node-id", "fenced", "-postgres", dsn}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg.Cluster
	c.Node.Timing = clusterTiming()
	// Renewed often, so the refusal is met soon after the downing.
	c.Node.Leases = lease.DefaultSettings()
	c.Node.Leases.Node = lease.Timing{Length: 3 * time.Second, RenewEvery: 200 * time.Millisecond, Margin: time.Second}
	n := startNode(t, func(cfg *Config) {
		cfg.Cluster, cfg.PostgresDSN, cfg.Sequences = c, dsn, nil
	})
	awaitReady(t, n)
	if err := leasepg.New(pgtest.NewPool(t, dsn, nil)).DownNode(context.Background(), n.Cluster.Self()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-n.Err():
		if !errors.Is(err, node.ErrFenced) {
			t.Fatalf("Err: %v, want node.ErrFenced", err)
		}
	case <-time.After(testPatience):
		t.Fatal("no error on Err after the node was downed")
	}
	if err := probeURL(context.Background(), n.APIURL+"/alive"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("/alive of a fenced node: %v, want 503", err)
	}
}

// A node with -admin-addr serves the admin API; asked there to leave, it
// reports ErrLeaveRequested on Err and stops nothing yet: the API still
// serves (the program now drains it, as on SIGTERM), and only Shutdown
// hands the shards off and leaves. A leave that handed the shards off
// first failed every request the API still accepted (500 "region
// stopped").
func TestClusterNodeLeavesThroughTheAdminAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL")
	}
	dsn := pg.MigratedDSN(t)
	o, err := parseArgs([]string{"-node-id", "leaver", "-postgres", dsn, "-admin-addr", "127.0.0.1:0", "-admin-token", "tok"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := o.cfg.Cluster
	c.Node.Timing = clusterTiming()
	n := startNode(t, func(cfg *Config) {
		cfg.Cluster, cfg.PostgresDSN, cfg.Sequences = c, dsn, nil
	})
	awaitReady(t, n)
	// The read model's daemon workers first: a last node that leaves
	// while its region still buffers their first keep-alives (no shard
	// allocated yet) waits 2×HandOffTimeout for a home that cannot come.
	awaitProjectionsRunning(t, n)
	admin := "http://" + n.Cluster.AdminAddr()
	if err := probeURL(context.Background(), admin+"/ready"); err != nil {
		t.Fatalf("admin /ready: %v", err)
	}
	order := "shop-1/leave1/payment"
	put(t, n, "example", "dummy", order, `{"amount":1000}`).want(t, 200, "")
	req, err := http.NewRequest(http.MethodPost, admin+"/admin/v1/leave", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("leave: %d", resp.StatusCode)
	}
	select {
	case err := <-n.Err():
		if !errors.Is(err, ErrLeaveRequested) {
			t.Fatalf("Err: %v, want ErrLeaveRequested", err)
		}
	case <-time.After(testPatience):
		t.Fatal("no ErrLeaveRequested on Err after the leave")
	}
	// Nothing stopped before the application drains.
	put(t, n, "example", "dummy", order, `{"amount":1000}`).want(t, 200, "")
	select {
	case <-n.Cluster.Done():
		t.Fatal("the cluster node stopped before the application shut it down")
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), testPatience)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown after the leave request: %v", err)
	}
	select {
	case <-n.Cluster.Done():
	default:
		t.Fatal("the cluster node still runs after Shutdown")
	}
}
