package sharding

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"unsafe"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
)

// recorder is an entity behavior that records, per entity, the messages
// it handled, in order.
type recorder struct {
	mu  sync.Mutex
	got map[string][]string
}

func (rec *recorder) create(entity.Context[string]) entity.Behavior[string] {
	return entity.Receive(func(ctx entity.Context[string], m string) entity.Behavior[string] {
		if m == "stop" {
			return entity.Stopped[string]()
		}
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.got == nil {
			rec.got = map[string][]string{}
		}
		rec.got[ctx.EntityID()] = append(rec.got[ctx.EntityID()], m)
		return entity.Same[string]()
	})
}

func (rec *recorder) of(id string) []string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]string(nil), rec.got[id]...)
}

// hostingRegion is a fastRegion of rec's entities, all in shard "s",
// which it hosts, with entity "running" started and the shard stamped
// routable; in the caller's bubble.
func hostingRegion(t *testing.T, rec *recorder) *Region[string] {
	t.Helper()
	r := fastRegion(t, Settings{ShardID: func(string) string { return "s" }}, rec.create)
	for range 2 { // hosts the shard, starts "running", stamps the shard
		if err := r.EntityRefFor("running").Tell("warm"); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
	}
	return r
}

// A Deliver from the transport for a shard the region hosts and routes
// to goes straight to the entity, running or not yet: the region's write
// lock is never taken (its epoch does not move, so its local shards stay
// on the fast path) and its control entity sees none of it.
func TestInboundDeliversGoStraightToHostedShards(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := hostingRegion(t, rec)
		epoch := r.mu.epoch.Load()
		for i, id := range []string{"running", "new", "running", "new"} {
			d := protocol.Deliver{Shard: "s", EntityID: id, Msg: string(rune('a' + i))}
			if err := r.s.remote.Send(r.self, d); err != nil {
				t.Fatal(err)
			}
			if q := r.queued.Load(); q != 0 {
				t.Fatalf("Deliver %d left %d messages for the control entity", i, q)
			}
		}
		synctest.Wait()
		if e := r.mu.epoch.Load(); e != epoch {
			t.Fatalf("the region's write lock was taken %d times for inbound Delivers", e-epoch)
		}
		if got := rec.of("running"); len(got) != 4 || got[2] != "a" || got[3] != "c" {
			t.Fatalf("running got %q, want [warm warm a c]", got)
		}
		if got := rec.of("new"); len(got) != 2 || got[0] != "b" || got[1] != "d" {
			t.Fatalf("new got %q, want [b d]", got)
		}
	})
}

// While a message from the transport waits in the control entity, a
// Deliver that could go straight to its entity waits behind it: a link's
// messages are handled in the order they came, whatever path each takes.
func TestInboundDeliverWaitsBehindQueuedMessages(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		shardOf := map[string]string{"e": "s1", "other": "s2"}
		r := fastRegion(t, Settings{ShardID: func(id string) string { return shardOf[id] }}, rec.create)
		for _, id := range []string{"e", "e", "other"} { // both shards hosted, e running and routed
			if err := r.EntityRefFor(id).Tell("warm"); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		r.mu.RLock()
		s2, _ := r.core.local("s2")
		r.mu.RUnlock()
		// The control entity answers GetRegionStats by reading every
		// shard's entities: it waits for s2's lock, held here.
		s2.mu.Lock()
		if err := r.s.remote.Send(r.self, protocol.GetRegionStats{}); err != nil {
			t.Fatal(err)
		}
		if err := r.s.remote.Send(r.self, protocol.Deliver{Shard: "s1", EntityID: "e", Msg: "behind"}); err != nil {
			t.Fatal(err)
		}
		if q := r.queued.Load(); q != 2 {
			s2.mu.Unlock()
			t.Fatalf("%d messages wait for the control entity, want 2 (the Deliver behind GetRegionStats)", q)
		}
		s2.mu.Unlock()
		synctest.Wait()
		if got := rec.of("e"); len(got) != 3 || got[2] != "behind" {
			t.Fatalf("e got %q, want [warm warm behind]", got)
		}
		if q := r.queued.Load(); q != 0 {
			t.Fatalf("%d messages still counted as waiting", q)
		}
		// Nothing waits any more: the next one goes straight through.
		epoch := r.mu.epoch.Load()
		if err := r.s.remote.Send(r.self, protocol.Deliver{Shard: "s1", EntityID: "e", Msg: "straight"}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := rec.of("e"); len(got) != 4 || got[3] != "straight" || r.mu.epoch.Load() != epoch {
			t.Fatalf("e got %q, epoch moved by %d", got, r.mu.epoch.Load()-epoch)
		}
	})
}

// An inbound Deliver's ids may be views of the frame it came in: the
// region keeps them, for an entity it starts or a message it queues, only
// as strings of their own, never as views of a frame that is then
// overwritten (as the frame of a transport that keeps no frame would be).
func TestInboundDeliversKeepOwnedIDs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &recorder{}
		r := hostingRegion(t, rec)
		frame := []byte("s" + "started" + "queued!")
		view := func(from, to int) string { return unsafe.String(&frame[from], to-from) }
		// Starts an entity: its id goes into the shard.
		if err := r.inboundDeliver(&protocol.Deliver{Shard: view(0, 1), EntityID: view(1, 8), Msg: "a"}); err != nil {
			t.Fatal(err)
		}
		// Queued behind a message from the transport that waits already.
		r.queued.Add(1)
		if err := r.inboundDeliver(&protocol.Deliver{Shard: view(0, 1), EntityID: view(8, 15), Msg: "b"}); err != nil {
			t.Fatal(err)
		}
		r.queued.Add(-1)
		clear(frame)
		synctest.Wait()
		if got := r.State().Shards["s"]; !slices.Equal(got, []string{"queued!", "running", "started"}) {
			t.Fatalf("entities %q, want queued!, running and started", got)
		}
		if got := rec.of("started"); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("started got %q", got)
		}
	})
}
