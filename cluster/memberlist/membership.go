// Package memberlist is cluster membership on hashicorp/memberlist (SWIM
// gossip with Lifeguard) behind the cluster.Membership seam.
//
// Each node incarnation gossips under a name of its own (node#incarnation)
// and carries its cluster.Member in memberlist's node metadata (Meta, at
// most 512 bytes). memberlist's delegates only copy what they are told into
// a queue and signal a channel; one goroutine turns the queue into views
// (a pure tracker) and tells subscribers, so nothing ever calls back into
// memberlist from inside it (its callbacks hold its node lock).
//
// Life cycle: New listens; Join contacts seeds (or Bootstrap starts a new
// cluster) and makes the node Up with a join order; SetLeaving makes it
// Leaving; the caller hands its work off; Leave broadcasts the leave and
// shuts down. Shutdown alone is a crash as far as the others can tell.
//
// Join order: a joining node takes one more than the highest join order it
// has seen once its join has merged the seeds' state; ties (two nodes
// joining at once through seeds that had not heard of each other) are
// broken by address, so every node that sees the same members agrees on
// the oldest. It is an order everyone agrees on, not a clock: a node that
// joins while partitioned from an older one may rank before it. Views may
// differ for a while, so "oldest" is an opinion; the coordinator lease in
// Postgres decides (docs/DESIGN.md, "Leases and self-fencing").
//
// Failures: memberlist declares a peer failed after its suspicion timeout
// and reports no suspicion before that, so a failed peer is Unreachable;
// it becomes reachable again when it refutes (this node keeps trying to
// rejoin it every ReconnectInterval, which heals long partitions), and Down
// after ReconnectTimeout. Downing a live incarnation for good is the
// leases' job.
package memberlist

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	ml "github.com/hashicorp/memberlist"

	"github.com/shoal-dev/shoal/cluster"
)

// ErrNoSeedReachable is returned (wrapped, with each seed's error) by Join
// when no seed answered.
var ErrNoSeedReachable = errors.New("memberlist: no seed reachable")

// ErrDuplicateIncarnation is returned (wrapped) by Join when the cluster
// already has a live node under this node's id and incarnation at another
// address: two processes were started as one incarnation. The cluster
// keeps the one it knew and ignores this one.
var ErrDuplicateIncarnation = errors.New("memberlist: another node runs this incarnation")

// ErrShutdown is returned (wrapped) by calls on a Membership that has left
// or shut down.
var ErrShutdown = errors.New("memberlist: membership shut down")

// Membership is one node's membership: a cluster.Membership fed by memberlist.
type Membership struct {
	cfg   Config
	list  *ml.Memberlist
	local *cluster.LocalMembership // publishes views to subscribers, in order
	addr  string

	metaMu  sync.Mutex
	meta    Meta
	encoded []byte

	// gossipAddrs maps each node memberlist knows to its gossip address,
	// copied from its events: memberlist's own Node values change under
	// its lock, which is not ours to take.
	gossipMu    sync.Mutex
	gossipAddrs map[string]string

	inbox   inbox
	barrier chan chan uint64 // Join asks the loop for the highest join order
	// admitted carries the names Config.Admit let in, to the loop, which
	// alone owns admitting (the admissions in flight, by member name).
	admitted  chan string
	admitting map[string]context.CancelFunc
	refusals  atomic.Uint64
	failed    chan []string // loop → reconnector: who to rejoin

	// duplicate is the address of another node seen gossiping under this
	// node's name, set by the conflict delegate.
	duplicate atomic.Pointer[string]

	// logs carries memberlist's log lines; it is told of graceful leaves.
	logs *logWriter

	lifeMu   sync.Mutex // serializes Join, SetLeaving, Leave, Shutdown
	shutdown bool
	stop     chan struct{}
	done     sync.WaitGroup
}

var _ cluster.Membership = (*Membership)(nil)

// New starts listening for gossip as a Joining member that knows only
// itself. Call Join or Bootstrap next, and Leave or Shutdown at the end.
func New(cfg Config) (*Membership, error) {
	cfg, err := cfg.withDefaults(time.Now())
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg:     cfg,
		meta:    cfg.meta(0, false),
		barrier: make(chan chan uint64),

		gossipAddrs: make(map[string]string),
		failed:      make(chan []string, 1),
		stop:        make(chan struct{}),
		admitted:    make(chan string),
		admitting:   make(map[string]context.CancelFunc),
	}
	m.inbox.wake = make(chan struct{}, 1)
	if m.encoded, err = m.meta.Encode(); err != nil {
		return nil, err
	}
	name := nodeName(cfg.self())
	tr := newTracker(name, m.meta, cfg.Timing, cfg.Admit == nil)
	m.local = cluster.NewLocalMembership(cfg.self(), tr.view())

	m.logs = newLogWriter(cfg.Logger)
	mc := cfg.memberlistConfig(m.logs)
	d := &delegate{m: m}
	mc.Delegate, mc.Events, mc.Alive, mc.Conflict = d, d, d, d
	if m.list, err = ml.Create(mc); err != nil {
		return nil, fmt.Errorf("memberlist: start %s: %w", name, err)
	}
	// Read once, before anyone knows this node: nothing rewrites it yet.
	self := m.list.LocalNode()
	m.addr = net.JoinHostPort(self.Addr.String(), strconv.Itoa(int(self.Port)))

	m.done.Add(2)
	go m.run(tr)
	go m.reconnect()
	return m, nil
}

// Self implements cluster.Membership.
func (m *Membership) Self() cluster.UniqueAddress { return m.cfg.self() }

// View implements cluster.Membership.
func (m *Membership) View() cluster.View { return m.local.View() }

// Subscribe implements cluster.Membership. fn runs on the membership's own
// goroutine, never inside memberlist.
func (m *Membership) Subscribe(fn func(cluster.Change)) (cluster.View, func()) {
	return m.local.Subscribe(fn)
}

// Addr is the gossip address peers reach this node at (host:port), the
// port resolved when BindPort was 0: what other nodes pass to Join.
func (m *Membership) Addr() string { return m.addr }

// Join contacts seeds (host:port, this node's own address is skipped) one
// at a time until ctx ends, merging each one's state, then takes a join
// order one higher than any it has seen and becomes Up. It returns
// ErrNoSeedReachable, wrapping each seed's error, when none answered; the
// node then stays Joining and may Join again. Joining a node that is
// already Up merges the seeds' state and keeps its join order.
func (m *Membership) Join(ctx context.Context, seeds []string) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return fmt.Errorf("memberlist: join: %w", ErrShutdown)
	}
	var errs []error
	joined := 0
	for _, seed := range seeds {
		if seed == m.addr {
			continue
		}
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		if _, err := m.list.Join([]string{seed}); err != nil {
			errs = append(errs, fmt.Errorf("seed %s: %w", seed, err))
			continue
		}
		joined++
	}
	if joined == 0 {
		if len(errs) == 0 {
			return fmt.Errorf("%w: no seed other than this node (%s) in %q", ErrNoSeedReachable, m.addr, seeds)
		}
		return fmt.Errorf("%w (%d seeds): %w", ErrNoSeedReachable, len(seeds), errors.Join(errs...))
	}
	if other := m.duplicate.Load(); other != nil {
		return fmt.Errorf("%w: %s runs at %s, this node at %s", ErrDuplicateIncarnation, m.Self(), *other, m.addr)
	}
	// The merge has queued an event for every member the seeds knew; the
	// barrier makes the loop apply them before it answers.
	reply := make(chan uint64, 1)
	select {
	case m.barrier <- reply:
	case <-ctx.Done():
		return fmt.Errorf("memberlist: join: %w", ctx.Err())
	}
	return m.becomeUp(ctx, <-reply+1)
}

// Bootstrap starts a new cluster: this node becomes Up with join order 1,
// unless it already has one. Only the first node of a cluster does this;
// every other Joins.
func (m *Membership) Bootstrap(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return fmt.Errorf("memberlist: bootstrap: %w", ErrShutdown)
	}
	return m.becomeUp(ctx, 1)
}

// becomeUp sets the join order, unless one is set, and broadcasts it.
func (m *Membership) becomeUp(ctx context.Context, order uint64) error {
	changed := m.setMeta(func(meta *Meta) {
		if meta.JoinOrder == 0 {
			meta.JoinOrder = order
		}
	})
	if !changed {
		return nil
	}
	return m.broadcast(ctx, "join order")
}

// SetLeaving makes this node Leaving in every view, the first step of a
// graceful leave: a Leaving node is never the oldest, so the others stop
// choosing it while it hands its work off. It waits until ctx ends for the
// change to be broadcast (it spreads anyway).
func (m *Membership) SetLeaving(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return fmt.Errorf("memberlist: set leaving: %w", ErrShutdown)
	}
	return m.setLeaving(ctx)
}

func (m *Membership) setLeaving(ctx context.Context) error {
	if !m.setMeta(func(meta *Meta) { meta.Leaving = true }) {
		return nil
	}
	return m.broadcast(ctx, "leaving")
}

// Leave ends a graceful leave once the caller has handed its work off:
// SetLeaving if that has not been done, then memberlist's Leave (the
// others mark this node Down at once) waiting until ctx ends for it to go
// out, then Shutdown. The membership is shut down even when it returns an
// error. Calling it again returns nil.
func (m *Membership) Leave(ctx context.Context) error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return nil
	}
	leavingErr := m.setLeaving(ctx)
	m.logs.selfLeaving()
	leaveErr := m.list.Leave(m.timeout(ctx))
	if leaveErr != nil {
		leaveErr = fmt.Errorf("memberlist: leave broadcast: %w", leaveErr)
	}
	return errors.Join(leavingErr, leaveErr, m.shutdownLocked())
}

// Shutdown stops gossiping without a word: the others detect a failure.
// Use Leave to go gracefully. Calling it again returns nil.
func (m *Membership) Shutdown() error {
	m.lifeMu.Lock()
	defer m.lifeMu.Unlock()
	if m.shutdown {
		return nil
	}
	return m.shutdownLocked()
}

func (m *Membership) shutdownLocked() error {
	m.shutdown = true
	err := m.list.Shutdown()
	close(m.stop)
	m.done.Wait()
	if err != nil {
		return fmt.Errorf("memberlist: shutdown: %w", err)
	}
	return nil
}

// setMeta changes this node's metadata; it reports whether it changed. The
// size was checked by New for every value it can take.
func (m *Membership) setMeta(change func(*Meta)) bool {
	m.metaMu.Lock()
	defer m.metaMu.Unlock()
	next := m.meta
	change(&next)
	if next.JoinOrder == m.meta.JoinOrder && next.Leaving == m.meta.Leaving {
		return false
	}
	encoded, err := next.Encode()
	if err != nil {
		panic("memberlist: metadata outgrew the size New checked: " + err.Error())
	}
	m.meta, m.encoded = next, encoded
	return true
}

// broadcast re-advertises this node's metadata and waits, until ctx ends,
// for it to go out.
func (m *Membership) broadcast(ctx context.Context, what string) error {
	if err := m.list.UpdateNode(m.timeout(ctx)); err != nil {
		return fmt.Errorf("memberlist: broadcast %s: %w", what, err)
	}
	return nil
}

// timeout turns ctx's deadline into the timeout memberlist takes.
func (m *Membership) timeout(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return max(time.Until(deadline), time.Millisecond)
	}
	return m.cfg.Timing.BroadcastTimeout
}

// run owns the tracker: it applies the delegate's events, expires failed
// and Down members and publishes every new view.
func (m *Membership) run(tr *tracker) {
	defer m.done.Done()
	ticker := time.NewTicker(m.cfg.Timing.ReconnectInterval)
	defer ticker.Stop()
	drain := func() {
		for _, ev := range m.inbox.take() {
			if !tr.apply(ev, time.Now()) {
				m.cfg.Logger.Debug("memberlist: ignored node event", "member", ev.name, "kind", ev.kind)
			}
		}
	}
	for {
		select {
		case <-m.inbox.wake:
			drain()
		case reply := <-m.barrier:
			drain()
			reply <- tr.maxJoinOrder
		case name := <-m.admitted:
			delete(m.admitting, name)
			tr.admit(name)
		case <-ticker.C:
			tr.expire(time.Now())
			select {
			case <-m.failed: // replace an unread list
			default:
			}
			m.failed <- tr.failed()
		case <-m.stop:
			drain() // the leave of this node itself
			m.local.Set(tr.view())
			for _, cancel := range m.admitting {
				cancel()
			}
			return
		}
		m.admit(tr)
		m.local.Set(tr.view())
	}
}

// admit starts Config.Admit for each member that awaits admission and has
// none in flight, and stops those whose member went Down or away. It runs
// on the loop's goroutine.
func (m *Membership) admit(tr *tracker) {
	if m.cfg.Admit == nil {
		return
	}
	awaiting := tr.awaiting()
	for name, cancel := range m.admitting {
		if _, ok := awaiting[name]; !ok {
			cancel()
			delete(m.admitting, name)
		}
	}
	for name, member := range awaiting {
		if _, ok := m.admitting[name]; ok {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		m.admitting[name] = cancel
		m.done.Add(1)
		go func() {
			defer m.done.Done()
			m.tryAdmit(ctx, name, member)
		}()
	}
}

// tryAdmit asks Config.Admit about member until it admits it or ctx ends,
// waiting between refusals from 100 ms doubling up to ReconnectInterval,
// and hands an admission to the loop.
func (m *Membership) tryAdmit(ctx context.Context, name string, member cluster.Member) {
	wait := 100 * time.Millisecond
	logged := false
	for {
		actx, cancel := context.WithTimeout(ctx, m.cfg.Timing.TCPTimeout)
		err := m.cfg.Admit(actx, member)
		cancel()
		if err == nil {
			select {
			case m.admitted <- name:
			case <-ctx.Done():
			case <-m.stop:
			}
			return
		}
		if ctx.Err() != nil {
			return
		}
		m.refusals.Add(1)
		if !logged {
			logged = true
			m.cfg.Logger.Warn("memberlist: member refused: it is left out of the views until the transport accepts it",
				"member", name, "endpoint", member.Endpoint, "err", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		case <-m.stop:
			t.Stop()
			return
		}
		wait = min(2*wait, m.cfg.Timing.ReconnectInterval)
	}
}

// Refusals counts how often Config.Admit refused a member, retries
// included: for operators and tests.
func (m *Membership) Refusals() uint64 { return m.refusals.Load() }

// reconnect tries to rejoin failed members: a partition longer than
// GossipToTheDeadTime heals only this way.
func (m *Membership) reconnect() {
	defer m.done.Done()
	for {
		select {
		case <-m.stop:
			return
		case targets := <-m.failed:
			for _, target := range targets {
				select {
				case <-m.stop:
					return
				default:
				}
				if _, err := m.list.Join([]string{target}); err != nil {
					m.cfg.Logger.Debug("memberlist: reconnect failed", "target", target, "err", err)
				}
			}
		}
	}
}

// inbox is where the delegate hands events over: an unbounded queue and a
// wake-up channel, so that memberlist, which calls the delegate holding
// its node lock, never waits for this package.
type inbox struct {
	mu     sync.Mutex
	events []nodeEvent
	wake   chan struct{}
}

func (b *inbox) push(ev nodeEvent) {
	b.mu.Lock()
	b.events = append(b.events, ev)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []nodeEvent {
	b.mu.Lock()
	defer b.mu.Unlock()
	evs := b.events
	b.events = nil
	return evs
}

// delegate is memberlist's view of this package. Every method returns at
// once and never calls memberlist.
type delegate struct{ m *Membership }

// NodeMeta implements memberlist.Delegate.
func (d *delegate) NodeMeta(limit int) []byte {
	d.m.metaMu.Lock()
	defer d.m.metaMu.Unlock()
	return append([]byte(nil), d.m.encoded...)
}

// NotifyMsg implements memberlist.Delegate; user messages are not used.
func (d *delegate) NotifyMsg([]byte) {}

// GetBroadcasts implements memberlist.Delegate; user broadcasts are not used.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState implements memberlist.Delegate; no state beyond members.
func (d *delegate) LocalState(join bool) []byte { return nil }

// MergeRemoteState implements memberlist.Delegate.
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// NotifyJoin implements memberlist.EventDelegate.
func (d *delegate) NotifyJoin(n *ml.Node) {
	d.m.setGossipAddr(n.Name, n.Address())
	d.m.inbox.push(copyEvent(nodeJoined, n))
}

// NotifyLeave implements memberlist.EventDelegate.
func (d *delegate) NotifyLeave(n *ml.Node) {
	if meta, err := DecodeMeta(n.Meta); err == nil && meta.Leaving {
		d.m.logs.memberLeft(n.Name, n.Address())
	}
	d.m.setGossipAddr(n.Name, "")
	d.m.inbox.push(copyEvent(nodeLeft, n))
}

// NotifyUpdate implements memberlist.EventDelegate.
func (d *delegate) NotifyUpdate(n *ml.Node) {
	d.m.setGossipAddr(n.Name, n.Address())
	d.m.inbox.push(copyEvent(nodeUpdated, n))
}

// NotifyAlive implements memberlist.AliveDelegate: a node whose metadata
// does not decode, or names another incarnation than its node name, is
// not a peer.
func (d *delegate) NotifyAlive(n *ml.Node) error {
	meta, err := DecodeMeta(n.Meta)
	if err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if got := nodeName(meta.Address); got != n.Name {
		return fmt.Errorf("%w: node %s carries metadata of %s", ErrInvalidMeta, n.Name, got)
	}
	return nil
}

// NotifyConflict implements memberlist.ConflictDelegate: two processes
// claim one incarnation, which unique incarnations should make impossible.
func (d *delegate) NotifyConflict(existing, other *ml.Node) {
	if existing.Name == nodeName(d.m.cfg.self()) {
		addr := other.Address()
		d.m.duplicate.CompareAndSwap(nil, &addr)
	}
	d.m.cfg.Logger.Error("memberlist: two nodes claim one incarnation; the newcomer is ignored",
		"member", existing.Name, "existing", existing.Address(), "other", other.Address())
}

func copyEvent(kind nodeEventKind, n *ml.Node) nodeEvent {
	return nodeEvent{kind: kind, name: n.Name, addr: n.Address(), meta: append([]byte(nil), n.Meta...)}
}

// GossipAddrs maps the name (node#incarnation, cluster.UniqueAddress's
// String) of every node memberlist knows alive or suspect to the address
// it gossips at: for operators.
func (m *Membership) GossipAddrs() map[string]string {
	m.gossipMu.Lock()
	defer m.gossipMu.Unlock()
	return maps.Clone(m.gossipAddrs)
}

// setGossipAddr records (or, with "", forgets) a node's gossip address.
func (m *Membership) setGossipAddr(name, addr string) {
	m.gossipMu.Lock()
	defer m.gossipMu.Unlock()
	if addr == "" {
		delete(m.gossipAddrs, name)
	} else {
		m.gossipAddrs[name] = addr
	}
}
