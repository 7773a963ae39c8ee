package clustertest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// The compose cluster's security from outside (see docs/DESIGN.md,
// "Members and views"): three nodes keyed by scripts/cluster-certs.sh, as
// make cluster-up keys them, form one cluster and serve payments; an
// intruder with the cluster's name but neither certificate nor gossip key
// is never listed by any node and gets no payment through; nor is one
// with the gossip key and a certificate from another CA: gossip lets it
// talk, the transport's handshake refuses it, and the members' admission
// keeps it out of their views.
func TestComposeSecurity(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	if out, err := exec.Command("bash", filepath.Join(root, "scripts", "cluster-certs.sh"), keys).CombinedOutput(); err != nil {
		t.Fatalf("scripts/cluster-certs.sh: %v\n%s", err, out)
	}
	gossipKey, err := os.ReadFile(filepath.Join(keys, "gossip.key"))
	if err != nil {
		t.Fatal(err)
	}
	sec := &Security{Dir: keys, GossipKey: strings.TrimSpace(string(gossipKey))}
	// The node names the certificates name (the compose file's).
	c := Start(t, Options{NamePrefix: "payment", Security: sec, Admin: true})
	ctx := scenarioContext(t)

	// (1) One cluster that serves.
	names := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		names[i] = n.Name
	}
	c.waitAllUp(ctx, names)
	for i, n := range c.Nodes {
		c.mustSettle(ctx, n, secOrder(fmt.Sprintf("m%d", i)))
	}

	// From here on, every node's view is read continuously; an intruder
	// listed once, in any status, fails the test.
	watch := c.watchMembers(ctx, "intruder")
	defer watch.stop()

	// (2) No certificate, no gossip key: the members drop its clear
	// gossip, so it never joins and gives up.
	bare := c.StartOutsider(ctx, "intruder1", nil, "-join-timeout=10s")
	c.checkCannotDeliver(ctx, bare)
	if code := bare.WaitExit(ctx); code == 0 {
		t.Errorf("intruder1 exited 0; it should give up joining:\n%s", bare.tail(20))
	}
	if logs := bare.Logs(ctx); !strings.Contains(logs, "no seed answered") {
		t.Errorf("intruder1 did not fail to join:\n%s", bare.tail(20))
	}

	// (3) The gossip key, but a certificate of another CA: gossip joins,
	// every member's admission probe is refused by the handshake.
	foreign := foreignCertificate(t, "intruder2")
	keyed := c.StartOutsider(ctx, "intruder2", &Security{Dir: foreign, GossipKey: sec.GossipKey})
	c.waitRefusedByAll(ctx, "intruder2", watch)
	// Its gossip joined, so it serves its API: the payment reaches it.
	keyed.waitAnswers(ctx)
	c.checkCannotDeliver(ctx, keyed)

	polls, seen := watch.stop()
	if polls == 0 {
		t.Fatal("the members were never read while the intruders ran")
	}
	if len(seen) > 0 {
		t.Fatalf("an intruder was listed:\n%s", strings.Join(slices.Compact(slices.Sorted(slices.Values(seen))), "\n"))
	}
	t.Logf("the intruders were never listed in %d reads of the members of %d nodes", polls, len(c.Nodes))

	// The cluster still serves, and still lists exactly its members.
	c.mustSettle(ctx, c.Nodes[0], secOrder("after"))
	c.waitAllUp(ctx, names)
}

// secOrder is an order id of this run (alphanumeric, at most 27
// characters) ending in tag.
func secOrder(tag string) string { return fmt.Sprintf("s%d%s", time.Now().UnixNano()%1e9, tag) }

// memberView is the part of GET /admin/v1/members the test reads.
type memberView struct {
	Members []struct {
		Node   string `json:"node"`
		Status string `json:"status"`
	} `json:"members"`
}

func (n *Node) members(ctx context.Context) (memberView, error) {
	var v memberView
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.AdminURL+"/admin/v1/members", nil)
	if err != nil {
		return v, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("GET /admin/v1/members: %s", resp.Status)
	}
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// waitAllUp waits until every node lists exactly names, all Up.
func (c *Cluster) waitAllUp(ctx context.Context, names []string) {
	c.t.Helper()
	deadline := time.Now().Add(opBound)
	for {
		var last string
		ok := true
		for _, n := range c.Nodes {
			v, err := n.members(ctx)
			var up []string
			for _, m := range v.Members {
				if m.Status == "Up" {
					up = append(up, m.Node)
				}
			}
			slices.Sort(up)
			if err != nil || len(v.Members) != len(names) || !slices.Equal(up, names) {
				ok = false
				last = fmt.Sprintf("%s lists %+v (%v)", n.Name, v.Members, err)
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("clustertest: the nodes do not all list %v Up within %v: %s", names, opBound, last)
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// mustSettle settles order through n and checks the journal holds it.
func (c *Cluster) mustSettle(ctx context.Context, n *Node, order string) {
	c.t.Helper()
	status, err := settle(ctx, n.URL, order)
	if err != nil || status != http.StatusOK {
		c.t.Fatalf("clustertest: settle %s through %s: %d, %v\n%s", order, n.Name, status, err, n.tail(20))
	}
	if len(c.paymentEvents(ctx, order)) == 0 {
		c.t.Fatalf("clustertest: %s acknowledged through %s but not in the journal", order, n.Name)
	}
}

// checkCannotDeliver sends a settlement through outsider: it must not be
// acknowledged and must leave nothing in the journal.
func (c *Cluster) checkCannotDeliver(ctx context.Context, outsider *Node) {
	c.t.Helper()
	order := secOrder(outsider.Name)
	status, err := settle(ctx, outsider.URL, order)
	if err == nil && status/100 == 2 {
		c.t.Errorf("clustertest: %s had a payment served: %d", outsider.Name, status)
	}
	if ev := c.paymentEvents(ctx, order); len(ev) != 0 {
		c.t.Errorf("clustertest: a payment sent through %s reached the journal: %v", outsider.Name, ev)
	}
	c.t.Logf("a payment through %s: status %d, %v; nothing in the journal", outsider.Name, status, err)
}

// waitAnswers waits until n's API answers /ready with any status.
func (n *Node) waitAnswers(ctx context.Context) {
	n.cl.t.Helper()
	deadline := time.Now().Add(opBound)
	for {
		resp, err := httpClient.Get(n.URL + "/ready")
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			n.cl.t.Fatalf("clustertest: %s's API does not answer within %v: %v\n%s", n.Name, opBound, err, n.tail(20))
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// waitRefusedByAll waits until every node has logged its admission's
// refusal of name, or until watch saw an intruder listed (the test then
// reports it).
func (c *Cluster) waitRefusedByAll(ctx context.Context, name string, watch *memberWatch) {
	c.t.Helper()
	deadline := time.Now().Add(opBound)
	for {
		var pending []string
		for _, n := range c.Nodes {
			refused := false
			for l := range strings.Lines(n.Logs(ctx)) {
				if strings.Contains(l, "member refused") && strings.Contains(l, name) {
					refused = true
					break
				}
			}
			if !refused {
				pending = append(pending, n.Name)
			}
		}
		if len(pending) == 0 || len(watch.listed()) > 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("clustertest: %v did not refuse %s within %v", pending, name, opBound)
		}
		pause(ctx, 200*time.Millisecond)
	}
}

// memberWatch reads every node's members until stopped and records each
// listing of a member whose name has a prefix.
type memberWatch struct {
	stopOnce sync.Once
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex
	polls    int
	seen     []string
}

// listed is what the watch saw listed so far.
func (w *memberWatch) listed() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen)
}

func (c *Cluster) watchMembers(ctx context.Context, prefix string) *memberWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &memberWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			for _, n := range c.Nodes {
				v, err := n.members(ctx)
				if err != nil {
					continue
				}
				w.mu.Lock()
				w.polls++
				for _, m := range v.Members {
					if strings.HasPrefix(m.Node, prefix) {
						w.seen = append(w.seen, fmt.Sprintf("%s listed by %s as %s", m.Node, n.Name, m.Status))
					}
				}
				w.mu.Unlock()
			}
			pause(ctx, 50*time.Millisecond)
		}
	}()
	return w
}

// stop ends the watch and returns how many reads succeeded and what they
// saw.
func (w *memberWatch) stop() (int, []string) {
	w.stopOnce.Do(w.cancel)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.polls, w.seen
}

// foreignCertificate writes, into a new directory, the files
// Security.Dir holds, for a node named name, from a CA of its own: a
// certificate the cluster's CA never signed.
func foreignCertificate(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "not the cluster's CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for file, block := range map[string]*pem.Block{
		"ca.pem":      {Type: "CERTIFICATE", Bytes: caDER},
		name + ".crt": {Type: "CERTIFICATE", Bytes: der},
		name + ".key": {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, file), pem.EncodeToMemory(block), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
