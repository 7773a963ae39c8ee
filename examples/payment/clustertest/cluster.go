package clustertest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcnetwork "github.com/testcontainers/testcontainers-go/network"

	"github.com/shoal-dev/shoal/internal/pgtest"
)

// Options shape a cluster.
type Options struct {
	// Nodes is how many payment nodes start. Default 3.
	Nodes int
	// Lease is the node and coordinator lease (payment -lease): the
	// shards of a crashed node move about this long after its last
	// renewal. Default 4s.
	Lease time.Duration
	// MinMembers is payment -min-members. Default 1.
	MinMembers int
	// Initial is how many of the nodes Start starts; AddNode starts the
	// others. Default Nodes.
	Initial int
	// ClockSkew offsets a node's wall clock (payment -clock-skew), by name.
	ClockSkew map[string]time.Duration
	// NamePrefix names the nodes prefix1, prefix2, ... Default "node".
	NamePrefix string
	// Security, when set, runs the nodes as the compose cluster does:
	// mutual TLS between nodes and encrypted gossip.
	Security *Security
	// Admin serves each node's admin API (payment -admin-addr), published
	// on 127.0.0.1 as Node.AdminURL.
	Admin bool
}

// Security is what a node needs for mutual TLS and encrypted gossip, laid
// out as scripts/cluster-certs.sh makes it: Dir holds ca.pem and each
// node's NAME.crt and NAME.key; GossipKey is base64, as in gossip.key.
// The files are copied into each container's /tls, as the compose file
// mounts them. An empty field leaves that part off (an intruder's setup).
type Security struct {
	Dir       string
	GossipKey string
}

func (o Options) withDefaults() Options {
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Lease <= 0 {
		o.Lease = 4 * time.Second
	}
	if o.MinMembers <= 0 {
		o.MinMembers = 1
	}
	if o.Initial <= 0 || o.Initial > o.Nodes {
		o.Initial = o.Nodes
	}
	if o.NamePrefix == "" {
		o.NamePrefix = "node"
	}
	return o
}

// Generous upper bounds that only keep a broken run from hanging; what a
// test asserts is the outcome, never how long the machine took.
const (
	startBound = 3 * time.Minute
	opBound    = 2 * time.Minute
	// buildBound bounds compiling the binaries and building the image. A
	// cold build beside make test's race builds took over 3 minutes on a
	// loaded 2-core machine, so it has a bound of its own, not startBound.
	buildBound = 20 * time.Minute
)

// Cluster is Postgres, the issuer simulator and payment nodes in
// containers on two networks of their own: "backend" (Postgres, the
// issuer, every node) and "cluster" (the nodes' gossip and transport).
// Cutting a node from the cluster network partitions it from its peers
// while it still reaches Postgres.
type Cluster struct {
	t      testing.TB
	opts   Options
	docker *testcontainers.DockerClient
	image  string

	backend, cluster *testcontainers.DockerNetwork
	pg               *tcpostgres.PostgresContainer
	// DB is a pool on the cluster's database, from the test process.
	DB    *pgxpool.Pool
	Nodes []*Node
}

// Node is one payment node's container. Its API is published on
// 127.0.0.1 at a port chosen at start and kept across restarts.
type Node struct {
	Name string
	// URL is the node's API from the test process.
	URL string
	// AdminURL is the node's admin API from the test process, with
	// Options.Admin.
	AdminURL string
	c        *testcontainers.DockerContainer
	cl       *Cluster
}

// Start starts a cluster for t and stops it when t ends. It skips t when
// no Docker daemon is reachable.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	opts = opts.withDefaults()
	pgImage := pgtest.Image(t) // skips without Docker; configures testcontainers
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), buildBound)
	defer cancelBuild()
	docker, err := testcontainers.NewDockerClientWithOpts(buildCtx)
	if err != nil {
		t.Fatalf("clustertest: docker client: %v", err)
	}
	t.Cleanup(func() { _ = docker.Close() })
	c := &Cluster{t: t, opts: opts, docker: docker}
	began := time.Now()
	if c.image, err = BuildImage(buildCtx, docker); err != nil {
		t.Fatal(err)
	}
	t.Logf("clustertest: image %s ready after %v", c.image, time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), startBound)
	defer cancel()
	for _, n := range []**testcontainers.DockerNetwork{&c.backend, &c.cluster} {
		if *n, err = tcnetwork.New(ctx); err != nil {
			t.Fatalf("clustertest: network: %v", err)
		}
		nw := *n
		t.Cleanup(func() { _ = nw.Remove(context.Background()) })
	}
	c.startPostgres(ctx, pgImage)
	c.startIssuer(ctx)
	for range opts.Initial {
		c.AddNode(ctx)
	}
	c.WaitAllReady(ctx)
	t.Logf("clustertest: %d nodes ready after %v", opts.Nodes, time.Since(began).Round(time.Millisecond))
	return c
}

// AddNode starts the next node (node1 bootstraps; the others join the
// seeds) without waiting for it to be ready.
func (c *Cluster) AddNode(ctx context.Context) *Node {
	c.t.Helper()
	i := len(c.Nodes)
	if i == c.opts.Nodes {
		c.t.Fatalf("clustertest: all %d nodes started", i)
	}
	name := c.nodeName(i)
	n := c.newNode(ctx, name, c.args(name, i == 0), c.opts.Security)
	c.Nodes = append(c.Nodes, n)
	return n
}

// nodeName is the name of the i-th node (from 0).
func (c *Cluster) nodeName(i int) string { return fmt.Sprintf("%s%d", c.opts.NamePrefix, i+1) }

// StartOutsider starts a node that is not one of the cluster's: it uses
// the cluster's name and flags, seeds every node, and joins with sec (nil:
// neither a certificate nor a gossip key) and extra flags. It is not in
// c.Nodes; the test waits for what it expects of it.
func (c *Cluster) StartOutsider(ctx context.Context, name string, sec *Security, extra ...string) *Node {
	c.t.Helper()
	return c.newNode(ctx, name, append(c.args(name, false), extra...), sec)
}

// hangAmount is the amount the issuer never answers: a payment of it stays
// in processing until its processing timeout.
const hangAmount = 777

// dsn is the nodes' database address on the backend network.
const dsn = "postgres://shoal:shoal@postgres:5432/payment?sslmode=disable"

func (c *Cluster) startPostgres(ctx context.Context, image string) {
	port := freePort(c.t)
	pg, err := tcpostgres.Run(ctx, image,
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		tcpostgres.WithDatabase("payment"), tcpostgres.WithUsername("shoal"), tcpostgres.WithPassword("shoal"),
		tcnetwork.WithNetwork([]string{"postgres"}, c.backend),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: port}},
			}
		}),
		testcontainers.WithCmd("postgres", "-c", "max_connections=300", "-c", "fsync=off"),
		tcpostgres.BasicWaitStrategies(),
	)
	if pg != nil {
		c.t.Cleanup(func() { _ = testcontainers.TerminateContainer(pg) })
	}
	if err != nil {
		c.t.Fatalf("clustertest: postgres: %v", err)
	}
	c.pg = pg
	hostDSN := "postgres://shoal:shoal@127.0.0.1:" + port + "/payment?sslmode=disable"
	if c.DB, err = pgxpool.New(ctx, hostDSN); err != nil {
		c.t.Fatalf("clustertest: %v", err)
	}
	c.t.Cleanup(c.DB.Close)
}

func (c *Cluster) startIssuer(ctx context.Context) {
	req := testcontainers.ContainerRequest{
		Image:          c.image,
		Cmd:            []string{"-issuer-only", "-issuer-addr=0.0.0.0:8081", "-issuer-hang-amount=" + strconv.Itoa(hangAmount)},
		Networks:       []string{c.backend.Name},
		NetworkAliases: map[string][]string{c.backend.Name: {"issuer"}},
	}
	ic, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: tclog.NewNoopLogger(),
	})
	if ic != nil {
		c.t.Cleanup(func() { _ = testcontainers.TerminateContainer(ic) })
	}
	if err != nil {
		c.t.Fatalf("clustertest: issuer: %v", err)
	}
}

// args are a node's flags: fast failure detection and a short lease, the
// counter entity and the activation log.
func (c *Cluster) args(name string, bootstrap bool) []string {
	var seeds []string
	for i := range c.opts.Nodes {
		if other := c.nodeName(i); other != name {
			seeds = append(seeds, other+":7946")
		}
	}
	args := []string{
		"-addr=0.0.0.0:8080",
		"-postgres=" + dsn,
		"-issuer-url=http://issuer:8081/payment",
		"-cluster-name=clustertest",
		"-node-id=" + name,
		"-gossip-addr=0.0.0.0:7946", "-gossip-advertise=" + name + ":7946",
		"-transport-addr=0.0.0.0:7947", "-transport-advertise=" + name + ":7947",
		"-seeds=" + strings.Join(seeds, ","),
		"-lease=" + c.opts.Lease.String(),
		"-gossip-timing=fast",
		"-min-members=" + strconv.Itoa(c.opts.MinMembers),
		"-drain-timeout=2s",
		"-counter", "-activation-log",
	}
	if bootstrap {
		args = append(args, "-bootstrap")
	}
	if skew := c.opts.ClockSkew[name]; skew != 0 {
		args = append(args, "-clock-skew="+skew.String())
	}
	if c.opts.Admin {
		args = append(args, "-admin-addr=0.0.0.0:9000")
	}
	return args
}

// secure adds sec's flags, environment and files for node name to req, as
// the compose file gives them (see examples/payment/deploy).
func secure(req *testcontainers.ContainerRequest, name string, sec *Security) {
	if sec == nil {
		return
	}
	if sec.Dir != "" {
		req.Cmd = append(req.Cmd, "-tls-ca=/tls/ca.pem", "-tls-cert=/tls/"+name+".crt", "-tls-key=/tls/"+name+".key")
		for _, f := range []string{"ca.pem", name + ".crt", name + ".key"} {
			req.Files = append(req.Files, testcontainers.ContainerFile{
				HostFilePath: filepath.Join(sec.Dir, f), ContainerFilePath: "/tls/" + f, FileMode: 0o644,
			})
		}
	}
	if sec.GossipKey != "" {
		req.Env = map[string]string{"SHOAL_GOSSIP_KEY": sec.GossipKey}
	}
}

// newNode creates and starts a node's container running args, secured
// by sec, without waiting for it.
func (c *Cluster) newNode(ctx context.Context, name string, args []string, sec *Security) *Node {
	port, adminPort := freePort(c.t), freePort(c.t)
	req := testcontainers.ContainerRequest{
		Image:        c.image,
		Cmd:          args,
		ExposedPorts: []string{"8080/tcp"},
		// The cluster network first: the node's name resolves there.
		Networks:       []string{c.cluster.Name, c.backend.Name},
		NetworkAliases: map[string][]string{c.cluster.Name: {name}},
		HostConfigModifier: func(hc *container.HostConfig) {
			hc.PortBindings = network.PortMap{
				network.MustParsePort("8080/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: port}},
			}
			if c.opts.Admin {
				hc.PortBindings[network.MustParsePort("9000/tcp")] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1"), HostPort: adminPort}}
			}
		},
	}
	if c.opts.Admin {
		req.ExposedPorts = append(req.ExposedPorts, "9000/tcp")
	}
	secure(&req, name, sec)
	gc, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: req, Started: true, Logger: tclog.NewNoopLogger(),
	})
	if gc != nil {
		c.t.Cleanup(func() {
			if c.t.Failed() {
				n := &Node{Name: name, c: gc.(*testcontainers.DockerContainer), cl: c}
				c.t.Logf("clustertest: %s's last log lines:\n%s", name, n.tail(40))
			}
			_ = testcontainers.TerminateContainer(gc)
		})
	}
	if err != nil {
		c.t.Fatalf("clustertest: start %s: %v", name, err)
	}
	n := &Node{Name: name, URL: "http://127.0.0.1:" + port, c: gc.(*testcontainers.DockerContainer), cl: c}
	if c.opts.Admin {
		n.AdminURL = "http://127.0.0.1:" + adminPort
	}
	return n
}

// WaitAllReady waits until every node answers /ready.
func (c *Cluster) WaitAllReady(ctx context.Context) {
	c.t.Helper()
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		wg.Go(func() { n.waitReady(ctx) })
	}
	wg.Wait()
	for _, n := range c.Nodes {
		if err := n.ready(ctx); err != nil {
			c.t.Fatalf("clustertest: %s not ready within %v: %v\n%s", n.Name, startBound, err, n.tail(30))
		}
	}
}

// Heal starts every node that is not running (killed, stopped, fenced)
// and waits until all are ready.
func (c *Cluster) Heal(ctx context.Context) {
	c.t.Helper()
	for _, n := range c.Nodes {
		if running, _ := n.Running(ctx); !running {
			n.Start(ctx)
		}
	}
	c.WaitAllReady(ctx)
}

// Coordinator is the node whose incarnation holds the payment type's
// coordinator lease, with the lease's epoch; it fails the test if no
// running node holds it within opBound.
func (c *Cluster) Coordinator(ctx context.Context) (*Node, uint64) {
	c.t.Helper()
	deadline := time.Now().Add(opBound)
	for {
		var owner string
		var epoch int64
		err := c.DB.QueryRow(ctx, `SELECT owner, epoch FROM coordinator_lease
			WHERE type_name = 'ec-house-money' AND expires_at > clock_timestamp()`).Scan(&owner, &epoch)
		if err == nil {
			name, _, _ := strings.Cut(owner, "#")
			for _, n := range c.Nodes {
				if n.Name == name {
					return n, uint64(epoch)
				}
			}
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("clustertest: no node holds the coordinator lease within %v (last: %q, %v)", opBound, owner, err)
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// ready reports nil when the node answers /ready with 200.
func (n *Node) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL+"/ready", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// waitReady polls /ready until it answers 200 or startBound passes. A
// node that exits on its own meanwhile (it fenced itself on a loaded
// host, or gave up joining) is started again, as the compose file's
// restart: on-failure does.
func (n *Node) waitReady(ctx context.Context) {
	deadline := time.Now().Add(startBound)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if n.ready(ctx) == nil {
			return
		}
		// Runs on a goroutine of WaitAllReady: no t.Fatal here.
		if ins, err := n.inspect(ctx); err == nil && ins.State != nil && !ins.State.Running && ins.State.ExitCode != 0 {
			n.cl.t.Logf("clustertest: %s exited %d while starting; starting it again", n.Name, ins.State.ExitCode)
			if _, err := n.cl.docker.ContainerStart(ctx, n.id(), client.ContainerStartOptions{}); err != nil {
				n.cl.t.Logf("clustertest: start %s: %v", n.Name, err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// WaitReady waits until the node answers /ready, failing the test at
// startBound.
func (n *Node) WaitReady(ctx context.Context) {
	n.cl.t.Helper()
	n.waitReady(ctx)
	if err := n.ready(ctx); err != nil {
		n.cl.t.Fatalf("clustertest: %s not ready within %v: %v\n%s", n.Name, startBound, err, n.tail(30))
	}
}

func (n *Node) id() string { return n.c.GetContainerID() }

// Kill sends SIGKILL: the node dies as in a crash (kill -9).
func (n *Node) Kill(ctx context.Context) {
	n.cl.t.Helper()
	if _, err := n.cl.docker.ContainerKill(ctx, n.id(), client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		n.cl.t.Fatalf("clustertest: kill %s: %v", n.Name, err)
	}
	n.WaitExit(ctx)
}

// Stop sends SIGTERM and waits for the node to leave gracefully (it is
// killed only if it outlasts a generous grace).
func (n *Node) Stop(ctx context.Context) {
	n.cl.t.Helper()
	grace := 60
	if _, err := n.cl.docker.ContainerStop(ctx, n.id(), client.ContainerStopOptions{Timeout: &grace}); err != nil {
		n.cl.t.Fatalf("clustertest: stop %s: %v", n.Name, err)
	}
	n.WaitExit(ctx)
}

// Start starts the node's container again: a new incarnation.
func (n *Node) Start(ctx context.Context) {
	n.cl.t.Helper()
	if _, err := n.cl.docker.ContainerStart(ctx, n.id(), client.ContainerStartOptions{}); err != nil {
		n.cl.t.Fatalf("clustertest: start %s: %v", n.Name, err)
	}
}

// Pause freezes the node's processes (docker pause); Unpause thaws them.
func (n *Node) Pause(ctx context.Context) {
	n.cl.t.Helper()
	if _, err := n.cl.docker.ContainerPause(ctx, n.id(), client.ContainerPauseOptions{}); err != nil {
		n.cl.t.Fatalf("clustertest: pause %s: %v", n.Name, err)
	}
}

// Unpause thaws a paused node.
func (n *Node) Unpause(ctx context.Context) {
	n.cl.t.Helper()
	if _, err := n.cl.docker.ContainerUnpause(ctx, n.id(), client.ContainerUnpauseOptions{}); err != nil {
		n.cl.t.Fatalf("clustertest: unpause %s: %v", n.Name, err)
	}
}

// Partition cuts the node from the cluster network: it loses its peers
// but still reaches Postgres and the issuer.
func (n *Node) Partition(ctx context.Context) {
	n.cl.t.Helper()
	if _, err := n.cl.docker.NetworkDisconnect(ctx, n.cl.cluster.ID, client.NetworkDisconnectOptions{Container: n.id(), Force: true}); err != nil {
		n.cl.t.Fatalf("clustertest: disconnect %s: %v", n.Name, err)
	}
}

// Reconnect joins the node to the cluster network again, under its name.
func (n *Node) Reconnect(ctx context.Context) {
	n.cl.t.Helper()
	if _, err := n.cl.docker.NetworkConnect(ctx, n.cl.cluster.ID, client.NetworkConnectOptions{
		Container: n.id(), EndpointConfig: &network.EndpointSettings{Aliases: []string{n.Name}},
	}); err != nil {
		n.cl.t.Fatalf("clustertest: connect %s: %v", n.Name, err)
	}
}

func (n *Node) inspect(ctx context.Context) (container.InspectResponse, error) {
	res, err := n.cl.docker.ContainerInspect(ctx, n.id(), client.ContainerInspectOptions{})
	return res.Container, err
}

// Running reports whether the node's process runs (paused counts), and
// its exit code when it does not.
func (n *Node) Running(ctx context.Context) (bool, int) {
	ins, err := n.inspect(ctx)
	if err != nil || ins.State == nil {
		n.cl.t.Fatalf("clustertest: inspect %s: %v", n.Name, err)
	}
	return ins.State.Running, ins.State.ExitCode
}

// WaitExit waits until the node's process has exited and returns its
// exit code; it fails the test if it still runs after opBound.
func (n *Node) WaitExit(ctx context.Context) int {
	n.cl.t.Helper()
	deadline := time.Now().Add(opBound)
	for {
		running, code := n.Running(ctx)
		if !running {
			return code
		}
		if time.Now().After(deadline) {
			n.cl.t.Fatalf("clustertest: %s still runs after %v\n%s", n.Name, opBound, n.tail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Logs is everything the node's container printed, over all its runs.
func (n *Node) Logs(ctx context.Context) string {
	n.cl.t.Helper()
	r, err := n.c.Logs(ctx)
	if err != nil {
		n.cl.t.Fatalf("clustertest: logs of %s: %v", n.Name, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		n.cl.t.Fatalf("clustertest: logs of %s: %v", n.Name, err)
	}
	return string(b)
}

// tail is the node's last lines, activation lines left out.
func (n *Node) tail(lines int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := n.c.Logs(ctx)
	if err != nil {
		return err.Error()
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	var keep []string
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, activationPrefix) {
			keep = append(keep, l)
		}
	}
	if len(keep) > lines {
		keep = keep[len(keep)-lines:]
	}
	return strings.Join(keep, "\n")
}

// RestartPostgres stops the database and starts it again.
func (c *Cluster) RestartPostgres(ctx context.Context, down time.Duration) {
	c.t.Helper()
	stop := 10 * time.Second
	if err := c.pg.Stop(ctx, &stop); err != nil {
		c.t.Fatalf("clustertest: stop postgres: %v", err)
	}
	time.Sleep(down) // the outage itself is the fault, not a wait for an outcome
	if err := c.pg.Start(ctx); err != nil {
		c.t.Fatalf("clustertest: start postgres: %v", err)
	}
}

// StallPostgres freezes the Postgres container for stall (docker pause):
// connections stay open and nothing answers, as a database stalled by
// its host would.
func (c *Cluster) StallPostgres(ctx context.Context, stall time.Duration) {
	c.t.Helper()
	id := c.pg.GetContainerID()
	if _, err := c.docker.ContainerPause(ctx, id, client.ContainerPauseOptions{}); err != nil {
		c.t.Fatalf("clustertest: pause postgres: %v", err)
	}
	time.Sleep(stall) // the stall itself is the fault, not a wait for an outcome
	if _, err := c.docker.ContainerUnpause(ctx, id, client.ContainerUnpauseOptions{}); err != nil {
		c.t.Fatalf("clustertest: unpause postgres: %v", err)
	}
}

// LeaseExpiries reads every node incarnation's lease expiry.
func (c *Cluster) LeaseExpiries(ctx context.Context) map[Incarnation]time.Time {
	c.t.Helper()
	rows, err := c.DB.Query(ctx, `SELECT node_id, incarnation, expires_at FROM node_leases`)
	if err != nil {
		c.t.Fatalf("clustertest: node leases: %v", err)
	}
	defer rows.Close()
	out := map[Incarnation]time.Time{}
	for rows.Next() {
		var node string
		var inc int64
		var at time.Time
		if err := rows.Scan(&node, &inc, &at); err != nil {
			c.t.Fatal(err)
		}
		out[Incarnation{node, uint64(inc)}] = at
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// Activations analyzes every node's activation log against the leases.
func (c *Cluster) Activations(ctx context.Context) ActivationReport {
	c.t.Helper()
	var all []Activation
	for _, n := range c.Nodes {
		acts, err := ParseActivations(strings.NewReader(n.Logs(ctx)))
		if err != nil {
			c.t.Fatalf("clustertest: %s: %v", n.Name, err)
		}
		all = append(all, acts...)
	}
	return Analyze(all, c.LeaseExpiries(ctx))
}

// CheckNoDualActivation fails the test if the activation logs show an
// entity active on two incarnations at once or a write conflict.
func (c *Cluster) CheckNoDualActivation(ctx context.Context) ActivationReport {
	c.t.Helper()
	rep := c.Activations(ctx)
	for i, o := range rep.Overlaps {
		if i == 10 {
			c.t.Errorf("... and %d more overlaps", len(rep.Overlaps)-10)
			break
		}
		c.t.Errorf("dual activation: %v", o)
	}
	for _, a := range rep.Conflicts {
		c.t.Errorf("write conflict: %s/%s on %s#%d at seq %d", a.Type, a.Entity, a.Node, a.Inc, a.SeqNr)
	}
	if len(rep.Intervals) == 0 {
		c.t.Error("the activation logs hold no activation: the check saw nothing")
	}
	return rep
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
