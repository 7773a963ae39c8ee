package node_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/internal/poll"
	"github.com/shoal-dev/shoal/node"
	"github.com/shoal-dev/shoal/sharding"
)

// crashLeases are the default lease length with room for a machine busy
// with the race detector and a CPU hog: a node fences itself only after
// 10 s without a successful renewal (it tries every second); 5 s was seen
// to fence a healthy node whose renewals waited that long for the pool.
func crashLeases(c *node.Config) {
	t := lease.Timing{Length: 15 * time.Second, RenewEvery: time.Second, Margin: 5 * time.Second}
	c.Leases = lease.Settings{Node: t, Coordinator: t}
}

// Three nodes over loopback and a real Postgres; one is killed (no
// graceful leave: its entities stop without stop messages, it vanishes
// from gossip, its leases are left to expire) while the others keep
// writing. memberlist reports it failed, the coordinator downs it in
// Postgres and, once its node lease has expired, moves its shards: its
// remembered entities restart on the survivors without a message, with
// their event-sourced state. No acknowledged operation is lost or applied
// twice, and the journal shows no two incarnations of an entity writing
// in turn. The killed node is the newest, or the oldest, which hosts the
// coordinator: then the coordinator lease must expire too.
func TestKilledNodeShardsComeBackElsewhere(t *testing.T) {
	t.Run("newest", func(t *testing.T) { testKill(t, 2) })
	t.Run("oldest", func(t *testing.T) { testKill(t, 0) })
}

func testKill(t *testing.T, victim int) {
	dsn := pg.MigratedDSN(t)
	settings := func(members int) sharding.Settings {
		// A short stable-after, so that the coordinator downs the victim
		// before its lease expires by itself (the test checks the down).
		return sharding.Settings{NumberOfShards: 30, MinMembers: members, RememberEntities: true, RetryInterval: 500 * time.Millisecond,
			DowningStableAfter: time.Second}
	}
	n1 := startNodeWith(t, dsn, "node-1", nil, settings(1), crashLeases)
	seeds := []string{n1.GossipAddr()}
	n2 := startNodeWith(t, dsn, "node-2", seeds, settings(2), crashLeases)
	n3 := startNodeWith(t, dsn, "node-3", seeds, settings(3), crashLeases)
	nodes := []*testNode{n1, n2, n3}
	awaitUp(t, nodes)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	led := newLedger()
	ids := led.firstOps(t, ctx, nodes)
	gone := nodes[victim]
	var stay []*testNode
	for i, n := range nodes {
		if i != victim {
			stay = append(stay, n)
		}
	}
	// The victim's entities; the load below touches only the first half
	// of ids, so that those of the second half come back by being
	// remembered, not by a message.
	onVictim := map[string]bool{}
	for _, entities := range gone.ops.State().Shards {
		for _, id := range entities {
			onVictim[id] = true
		}
	}
	quiet := slices.DeleteFunc(slices.Clone(ids[30:]), func(id string) bool { return !onVictim[id] })
	if len(onVictim) == 0 || len(quiet) == 0 {
		t.Fatalf("victim %s hosts %d entities, %d of them untouched by the load", gone.Self(), len(onVictim), len(quiet))
	}

	stopLoad := led.load(ctx, stay, ids[:30], 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	killedAt := time.Now()
	gone.Kill()

	// Its remembered entities come back on the survivors unasked.
	poll.Within(t, 2*time.Minute, "the victim's remembered entities restart on the survivors", func() error {
		running := map[string]bool{}
		for _, n := range stay {
			for _, entities := range n.ops.State().Shards {
				for _, id := range entities {
					running[id] = true
				}
			}
		}
		for _, id := range quiet {
			if !running[id] {
				return fmt.Errorf("%s not running on %s or %s", id, stay[0].Self(), stay[1].Self())
			}
		}
		return nil
	})
	t.Logf("remembered entities of %s back %v after the kill", gone.Self(), time.Since(killedAt).Round(100*time.Millisecond))
	time.Sleep(time.Second) // the load runs on the new homes too
	stopLoad()

	for _, id := range ids {
		var s Snapshot
		poll.Within(t, time.Minute, "read "+id, func() error {
			var err error
			s, err = read(ctx, stay[0].ops, id)
			return err
		})
		if s.Node == gone.Self().Node {
			t.Fatalf("%s answered by the killed node", id)
		}
		led.check(t, id, s.Ops)
	}
	pool := pgtest.NewPool(t, dsn, nil)
	checkWriterRuns(t, pool)
	// It was downed, not just left to expire: when it was the newest. The
	// oldest hosted the coordinator, whose successor acts only after the
	// coordinator lease expired, by when the victim's node lease expired
	// too: a new coordinator waits DowningStableAfter before it downs, so
	// it finds the lease expired first, and nothing is left to down.
	var down bool
	if err := pool.QueryRow(ctx, `SELECT down FROM node_leases WHERE node_id = $1 AND incarnation = $2`,
		gone.Self().Node, int64(gone.Self().Incarnation)).Scan(&down); err != nil || !down && victim != 0 {
		t.Fatalf("%s's node lease: down %v, %v; want downed by the coordinator", gone.Self(), down, err)
	}
	for _, n := range stay {
		if err := n.Ready(); err != nil {
			t.Fatalf("%s not ready: %v", n.Self(), err)
		}
	}
}

// checkWriterRuns: in each entity's journal, the writer ids (one per
// entity incarnation) form runs, and no writer comes back after another
// wrote: two incarnations never wrote in turn.
func checkWriterRuns(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT persistence_id, writer_id FROM event_journal ORDER BY persistence_id, seq_nr`)
	if err != nil {
		t.Fatal(err)
	}
	var pid, writer string
	last := map[string]string{}
	done := map[string]map[string]bool{}
	events := 0
	_, err = pgx.ForEachRow(rows, []any{&pid, &writer}, func() error {
		events++
		if done[pid] == nil {
			done[pid] = map[string]bool{}
		}
		if prev := last[pid]; prev != writer {
			if done[pid][writer] {
				return fmt.Errorf("%s: writer %s wrote again after %s: two incarnations in turn", pid, writer, prev)
			}
			done[pid][prev] = true
			last[pid] = writer
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if events == 0 {
		t.Fatal("the journal is empty")
	}
}

// A node cut off from Postgres cannot renew its node lease: it fences
// itself by its own clock, before the database lets its lease expire,
// stopping every entity at once; Alive says why.
func TestNodeCutOffFromPostgresFencesItself(t *testing.T) {
	dsn := pg.MigratedDSN(t)
	proxy := newCutProxy(t, dsn)
	n := startNodeWith(t, proxy.dsn, "cut", nil, sharding.Settings{NumberOfShards: 10}, crashLeases, func(c *node.Config) {
		c.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
	})
	poll.Within(t, time.Minute, "ready", n.Ready)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := apply(ctx, n.ops, "e", "op-1"); err != nil {
		t.Fatal(err)
	}
	proxy.cut()
	poll.Within(t, time.Minute, "fenced", func() error {
		if err := n.Alive(); !errors.Is(err, node.ErrFenced) {
			return fmt.Errorf("Alive: %v", err)
		}
		return nil
	})
	poll.Within(t, time.Minute, "entities stopped", func() error {
		if err := n.ops.EntityRefFor("e").Tell(Apply{Op: "op-2"}); !errors.Is(err, sharding.ErrRegionStopped) {
			return fmt.Errorf("Tell after fencing: %v, want ErrRegionStopped", err)
		}
		for shard, entities := range n.ops.State().Shards {
			if len(entities) > 0 {
				return fmt.Errorf("shard %s still runs %v", shard, entities)
			}
		}
		return nil
	})
}

// cutProxy forwards loopback TCP to Postgres until cut, which closes every
// connection and refuses new ones: the database is unreachable.
type cutProxy struct {
	dsn string
	ln  net.Listener

	mu    sync.Mutex
	conns []net.Conn
	isCut bool
}

func newCutProxy(t *testing.T, dsn string) *cutProxy {
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
	p := &cutProxy{dsn: u.String(), ln: ln}
	t.Cleanup(p.cut)
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
			if !p.track(c, up) {
				return
			}
			go func() { _, _ = io.Copy(up, c); up.Close() }()
			go func() { _, _ = io.Copy(c, up); c.Close() }()
		}
	}()
	return p
}

func (p *cutProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.isCut {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, cs...)
	return true
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isCut = true
	p.ln.Close()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}
