package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/cluster/memberlist"
	"github.com/shoal-dev/shoal/cluster/tcp"
	"github.com/shoal-dev/shoal/node"
)

// Cluster configures a payment node that is one member of a cluster: the
// journal, sharding's stores and the node lease in Postgres, membership on
// memberlist, messages over TCP (package node).
type Cluster struct {
	// Node is the Shoal node. Codec, Logger and Entity.Clock are filled in
	// by Start; PostgresDSN defaults to Config.PostgresDSN.
	Node node.Config
	// Bootstrap starts a new cluster when none of the seeds answers (Akka's
	// rule for the first seed node). Give it to one node only: two nodes
	// that both bootstrap make two clusters. A node that bootstrapped
	// keeps trying its seeds (node.Config.RejoinSeeds), so that one
	// restarted while cut off from its cluster merges back after the
	// heal. Without it the node retries its seeds until JoinTimeout.
	Bootstrap bool
	// JoinTimeout bounds the retries of the seeds. Default 1m.
	JoinTimeout time.Duration
	// MinMembers is how many nodes must host payments before shards are
	// first allocated. Default 1.
	MinMembers int
}

// ErrInvalidFlags is wrapped by every *FlagError.
var ErrInvalidFlags = errors.New("invalid flags")

// FlagError is a command line the program refuses: which flag, what it
// was given, and why.
type FlagError struct {
	Flag   string
	Value  string
	Reason string
	// Err is the underlying cause, if any (a file that cannot be read).
	Err error
}

func (e *FlagError) Error() string {
	msg := fmt.Sprintf("-%s %q: %s", e.Flag, e.Value, e.Reason)
	if e.Flag == "" {
		msg = fmt.Sprintf("%q: %s", e.Value, e.Reason)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *FlagError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidFlags}
	}
	return []error{ErrInvalidFlags, e.Err}
}

// clusterFlags are the command line's cluster settings; setting any of
// them selects cluster mode.
type clusterFlags struct {
	nodeID, seeds, clusterName        string
	gossipAddr, gossipAdvertise       string
	transportAddr, transportAdvertise string
	tlsCert, tlsKey, tlsCA            string
	gossipKey                         string
	adminAddr, adminToken             string
	adminReadsNeedToken               bool
	bootstrap                         bool
	minMembers                        int
	appVersion                        string
	joinTimeout                       time.Duration
	lease                             time.Duration
	gossipTiming                      string
}

// clusterFlagNames are the flags that select cluster mode.
var clusterFlagNames = []string{
	"node-id", "seeds", "bootstrap", "cluster-name", "gossip-addr", "gossip-advertise",
	"transport-addr", "transport-advertise", "tls-cert", "tls-key", "tls-ca", "gossip-key", "min-members", "join-timeout", "app-version",
	"admin-addr", "admin-token", "admin-reads-need-token",
	"lease", "gossip-timing",
}

func (c *clusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.nodeID, "node-id", "", "cluster mode: this node's name, unique in the cluster (requires -postgres)")
	fs.StringVar(&c.seeds, "seeds", "", "cluster mode: gossip addresses (host:port, comma-separated) of members to join")
	fs.BoolVar(&c.bootstrap, "bootstrap", false, "cluster mode: start a new cluster when no seed answers (one node only)")
	fs.StringVar(&c.clusterName, "cluster-name", "", "cluster mode: refuse members of clusters with another name (default \"shoal\")")
	fs.StringVar(&c.gossipAddr, "gossip-addr", "", "cluster mode: memberlist's listen address, UDP and TCP (default 127.0.0.1:0)")
	fs.StringVar(&c.gossipAdvertise, "gossip-advertise", "", "cluster mode: the gossip address peers reach this node at; a host name is resolved to its IP at start (needed when -gossip-addr is a wildcard)")
	fs.StringVar(&c.transportAddr, "transport-addr", "", "cluster mode: the message transport's listen address (default 127.0.0.1:0)")
	fs.StringVar(&c.transportAdvertise, "transport-advertise", "", "cluster mode: the transport address peers dial (needed when -transport-addr is a wildcard)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "cluster mode: PEM certificate of this node for mutual TLS between nodes; it must name -node-id among its DNS names (with -tls-key and -tls-ca)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "cluster mode: PEM private key of -tls-cert")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "cluster mode: PEM certificates of the CAs that sign the nodes' certificates")
	fs.StringVar(&c.gossipKey, "gossip-key", os.Getenv("SHOAL_GOSSIP_KEY"), "cluster mode: base64 of the 32-byte key (or 16, 24) that encrypts gossip ($SHOAL_GOSSIP_KEY, which keeps it out of the process list; `openssl rand -base64 32`); every node needs the same; empty: gossip in the clear")
	fs.IntVar(&c.minMembers, "min-members", 1, "cluster mode: nodes that must host payments before shards are first allocated")
	fs.StringVar(&c.appVersion, "app-version", "", "cluster mode: this build's version, gossiped to the other nodes (the admin API's members show it during a rolling update)")
	fs.DurationVar(&c.joinTimeout, "join-timeout", time.Minute, "cluster mode: how long to retry the seeds when none answers")
	fs.StringVar(&c.adminAddr, "admin-addr", "", "cluster mode: where the node's admin API listens (host:port; read it with the shoal command, e.g. shoal members); empty: off")
	fs.StringVar(&c.adminToken, "admin-token", os.Getenv("SHOAL_ADMIN_TOKEN"), "cluster mode: bearer token of the admin API's actions ($SHOAL_ADMIN_TOKEN); empty: actions off")
	fs.BoolVar(&c.adminReadsNeedToken, "admin-reads-need-token", false, "cluster mode: the admin API's reads need the token too")
	fs.DurationVar(&c.lease, "lease", 0, "cluster mode: length of the node and coordinator leases, renewed every third of it, fenced a fifth before its end; the shards of a crashed node move after about this long; every node must use the same (default 2s)")
	fs.StringVar(&c.gossipTiming, "gossip-timing", "lan", "cluster mode: failure detection, \"lan\" (memberlist's LAN defaults: a crashed node is declared failed after about 4 s) or \"fast\" (about 1 s: for tests on one host)")
}

// minLease is the shortest -lease: renewals every third of it must fit
// a database round trip on a busy host.
const minLease = 900 * time.Millisecond

// leaseSettings are the node and coordinator leases for -lease d.
func leaseSettings(d time.Duration) lease.Settings {
	t := lease.Timing{Length: d, RenewEvery: d / 3, Margin: d / 5}
	return lease.Settings{Node: t, Coordinator: t}
}

// fastGossipTiming is -gossip-timing fast: memberlist.FastTiming with a
// probe timeout and suspicion a little looser, so that a loaded CI host
// does not declare live nodes failed.
func fastGossipTiming() memberlist.Timing {
	t := memberlist.FastTiming()
	t.ProbeInterval, t.ProbeTimeout = 200*time.Millisecond, 150*time.Millisecond
	t.SuspicionMult, t.SuspicionMaxTimeoutMult = 3, 3
	t.TCPTimeout = time.Second
	return t
}

// config returns the Cluster the flags describe, or nil when no cluster
// flag was set (fs parsed them); postgresDSN is the -postgres flag. Every
// refusal is a *FlagError.
func (c *clusterFlags) config(fs *flag.FlagSet, postgresDSN string) (*Cluster, error) {
	var set []string
	fs.Visit(func(f *flag.Flag) {
		if slices.Contains(clusterFlagNames, f.Name) {
			set = append(set, "-"+f.Name)
		}
	})
	if len(set) == 0 {
		return nil, nil
	}
	why := "required in cluster mode (selected by " + strings.Join(set, ", ") + ")"
	if c.nodeID == "" {
		return nil, &FlagError{Flag: "node-id", Reason: why}
	}
	if strings.ContainsAny(c.nodeID, "/ ") {
		return nil, &FlagError{Flag: "node-id", Value: c.nodeID, Reason: "must not contain '/' or spaces"}
	}
	if postgresDSN == "" {
		return nil, &FlagError{Flag: "postgres", Reason: why + ": the journal, the shard allocations and the node leases live there"}
	}
	if c.minMembers < 1 {
		return nil, &FlagError{Flag: "min-members", Value: strconv.Itoa(c.minMembers), Reason: "must be at least 1"}
	}
	if c.joinTimeout < 0 {
		return nil, &FlagError{Flag: "join-timeout", Value: c.joinTimeout.String(), Reason: "must not be negative"}
	}
	nc := node.DefaultConfig(c.nodeID)
	nc.PostgresDSN = postgresDSN
	if c.lease != 0 {
		if c.lease < minLease {
			return nil, &FlagError{Flag: "lease", Value: c.lease.String(), Reason: "must be at least " + minLease.String()}
		}
		nc.Leases = leaseSettings(c.lease)
	}
	switch c.gossipTiming {
	case "lan":
	case "fast":
		nc.Timing = fastGossipTiming()
	default:
		return nil, &FlagError{Flag: "gossip-timing", Value: c.gossipTiming, Reason: "must be lan or fast"}
	}
	if c.clusterName != "" {
		nc.ClusterName = c.clusterName
	}
	for _, s := range strings.Split(c.seeds, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if err := checkAddr("seeds", s, false); err != nil {
			return nil, err
		}
		nc.Seeds = append(nc.Seeds, s)
	}
	if len(nc.Seeds) == 0 && c.seeds != "" {
		return nil, &FlagError{Flag: "seeds", Value: c.seeds, Reason: "no address in the list"}
	}
	var err error
	if nc.GossipAddr, nc.GossipAdvertise, err = listenFlags("gossip", c.gossipAddr, c.gossipAdvertise, nc.GossipAddr); err != nil {
		return nil, err
	}
	if nc.TransportAddr, nc.TransportAdvertise, err = listenFlags("transport", c.transportAddr, c.transportAdvertise, nc.TransportAddr); err != nil {
		return nil, err
	}
	if nc.ServerTLS, nc.ClientTLS, err = c.loadTLS(); err != nil {
		return nil, err
	}
	if nc.SecretKey, err = parseGossipKey(c.gossipKey); err != nil {
		return nil, err
	}
	if c.adminAddr != "" {
		if err := checkAddr("admin-addr", c.adminAddr, true); err != nil {
			return nil, err
		}
	}
	if c.adminReadsNeedToken && c.adminToken == "" {
		return nil, &FlagError{Flag: "admin-reads-need-token", Value: "true", Reason: "needs -admin-token (or $SHOAL_ADMIN_TOKEN)"}
	}
	nc.AdminAddr, nc.AdminToken, nc.AdminReadsNeedToken = c.adminAddr, c.adminToken, c.adminReadsNeedToken
	nc.AppVersion = c.appVersion
	return &Cluster{Node: nc, Bootstrap: c.bootstrap, JoinTimeout: c.joinTimeout, MinMembers: c.minMembers}, nil
}

// listenFlags checks the -NAME-addr and -NAME-advertise pair: a wildcard
// bind needs an advertised address, which must be one a peer can dial.
func listenFlags(name, addr, advertise, def string) (string, string, error) {
	if addr == "" {
		addr = def
	}
	if err := checkAddr(name+"-addr", addr, true); err != nil {
		return "", "", err
	}
	if advertise != "" {
		if err := checkAddr(name+"-advertise", advertise, false); err != nil {
			return "", "", err
		}
		if host, _, _ := net.SplitHostPort(advertise); isWildcard(host) {
			return "", "", &FlagError{Flag: name + "-advertise", Value: advertise, Reason: "a wildcard address cannot be dialed by peers"}
		}
		return addr, advertise, nil
	}
	if host, _, _ := net.SplitHostPort(addr); isWildcard(host) {
		return "", "", &FlagError{Flag: name + "-addr", Value: addr,
			Reason: "binds every interface: set -" + name + "-advertise to the address peers reach this node at"}
	}
	return addr, "", nil
}

// checkAddr checks that s is host:port with a port peers can use (0, a
// free port, only for listen addresses).
func checkAddr(flagName, s string, listen bool) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return &FlagError{Flag: flagName, Value: s, Reason: "not host:port", Err: err}
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return &FlagError{Flag: flagName, Value: s, Reason: "the port is not a number from 0 to 65535"}
	}
	if p == 0 && !listen {
		return &FlagError{Flag: flagName, Value: s, Reason: "port 0 is not an address to dial"}
	}
	if host == "" && !listen {
		return &FlagError{Flag: flagName, Value: s, Reason: "no host"}
	}
	return nil
}

func isWildcard(host string) bool {
	if host == "" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsUnspecified()
}

// parseGossipKey decodes -gossip-key: standard base64 of an AES key of
// 16, 24 or 32 bytes (memberlist's SecretKey); empty is no key. The value
// is never echoed in an error: it is a secret.
func parseGossipKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, &FlagError{Flag: "gossip-key", Value: "(hidden)", Reason: "not standard base64 (make one with `openssl rand -base64 32`)", Err: err}
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, &FlagError{Flag: "gossip-key", Value: "(hidden)",
		Reason: fmt.Sprintf("decodes to %d bytes; want 32 (AES-256), or 16 or 24", len(key))}
}

// loadTLS reads -tls-cert, -tls-key and -tls-ca: all three or none.
func (c *clusterFlags) loadTLS() (server, client *tls.Config, err error) {
	files := []struct{ flag, path string }{{"tls-cert", c.tlsCert}, {"tls-key", c.tlsKey}, {"tls-ca", c.tlsCA}}
	given := 0
	for _, f := range files {
		if f.path != "" {
			given++
		}
	}
	if given == 0 {
		return nil, nil, nil
	}
	if given < len(files) {
		for _, f := range files {
			if f.path == "" {
				return nil, nil, &FlagError{Flag: f.flag, Reason: "mutual TLS needs -tls-cert, -tls-key and -tls-ca together"}
			}
		}
	}
	cert, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
	if err != nil {
		return nil, nil, &FlagError{Flag: "tls-cert", Value: c.tlsCert, Reason: "cannot load the key pair (with -tls-key " + c.tlsKey + ")", Err: err}
	}
	pem, err := os.ReadFile(c.tlsCA)
	if err != nil {
		return nil, nil, &FlagError{Flag: "tls-ca", Value: c.tlsCA, Reason: "cannot read", Err: err}
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, nil, &FlagError{Flag: "tls-ca", Value: c.tlsCA, Reason: "no PEM certificate in it"}
	}
	server, client = tcp.MutualTLS(cert, roots)
	return server, client, nil
}

// startClusterNode starts the Shoal node of c, retrying the seeds while
// none answers, up to c.JoinTimeout, or bootstrapping a new cluster at
// once when c.Bootstrap is set.
func startClusterNode(ctx context.Context, c Cluster, log *slog.Logger) (*node.Node, error) {
	cfg := c.Node
	if err := resolveGossipAdvertise(ctx, &cfg); err != nil {
		return nil, err
	}
	timeout := c.JoinTimeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		n, err := node.Start(ctx, cfg)
		if err == nil || !errors.Is(err, memberlist.ErrNoSeedReachable) {
			return n, err
		}
		if c.Bootstrap {
			log.Warn("no seed answered: bootstrapping a new cluster", "seeds", cfg.Seeds, "err", err)
			boot := cfg
			boot.Seeds, boot.RejoinSeeds = nil, cfg.Seeds // merges back once a seed answers
			return node.Start(ctx, boot)
		}
		if !time.Now().Add(joinRetry).Before(deadline) {
			return nil, fmt.Errorf("no seed answered within %v: %w", timeout, err)
		}
		log.Warn("no seed answered; retrying", "seeds", cfg.Seeds, "in", joinRetry, "err", err)
		t := time.NewTimer(joinRetry)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, ctx.Err())
		case <-t.C:
		}
	}
}

// joinRetry is the pause between attempts to join the seeds.
const joinRetry = 2 * time.Second

// resolveGossipAdvertise replaces a host name in GossipAdvertise by its
// address: memberlist advertises IPs only, while a container knows its
// name (the compose service) and not its address.
func resolveGossipAdvertise(ctx context.Context, cfg *node.Config) error {
	if cfg.GossipAdvertise == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(cfg.GossipAdvertise)
	if err != nil {
		return &FlagError{Flag: "gossip-advertise", Value: cfg.GossipAdvertise, Reason: "not host:port", Err: err}
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return nil
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return &FlagError{Flag: "gossip-advertise", Value: cfg.GossipAdvertise, Reason: "cannot resolve the host name", Err: err}
	}
	// Prefer IPv4: memberlist's default bind is an IPv4 wildcard.
	ip := ips[0]
	for _, a := range ips {
		if a.Unmap().Is4() {
			ip = a.Unmap()
			break
		}
	}
	cfg.GossipAdvertise = net.JoinHostPort(ip.String(), port)
	return nil
}
