package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
)

var errJournalDown = errors.New("journal down")

// downJournal is a journal that can be taken down: every call fails.
type downJournal struct {
	journal.Journal // only the interface's methods: no asynchronous writer that bypasses down
	down            atomic.Bool
}

func (j *downJournal) Write(ctx context.Context, evs []journal.Event) error {
	if j.down.Load() {
		return errJournalDown
	}
	return j.Journal.Write(ctx, evs)
}

// The side writes carry the payment's processing-timeout reminder (see
// timeout.go); they fail while down too.
func (j *downJournal) WriteWithSide(ctx context.Context, evs []journal.Event, side journal.Side) error {
	if j.down.Load() {
		return errJournalDown
	}
	return j.Journal.(journal.SideWriter).WriteWithSide(ctx, evs, side)
}

func (j *downJournal) WriteAsyncWithSide(_ context.Context, evs []journal.Event, side journal.Side, done func(error)) {
	done(j.WriteWithSide(context.Background(), evs, side))
}

func (j *downJournal) SideStore() string { return j.Journal.(journal.SideWriter).SideStore() }

func (j *downJournal) Replay(ctx context.Context, pid string, from, to uint64, fn func(journal.Event) error) error {
	if j.down.Load() {
		return errJournalDown
	}
	return j.Journal.Replay(ctx, pid, from, to, fn)
}

func (j *downJournal) HighestSeqNr(ctx context.Context, pid string) (uint64, error) {
	if j.down.Load() {
		return 0, errJournalDown
	}
	return j.Journal.HighestSeqNr(ctx, pid)
}

// While the journal is down, an entity that failed backs off, and requests
// for it are answered 503 with Retry-After at once instead of 500 at the ask
// timeout. Once the journal is back the entity recovers by itself after its
// back-off and the payment settles, exactly once.
func TestAPIUnavailableWhileTheJournalIsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, _ := remindingJournal()
		j := &downJournal{Journal: mem}
		b := newBubbleAPIOn(t, DefaultSettings(), nil, j, mem)
		j.down.Store(true)
		const path = "shop-1/down/payment"
		first := b.put(path, amount1000) // its entity fails to recover, and backs off

		start := time.Now()
		res := <-b.put(path, amount1000)
		if took := time.Since(start); took != 0 {
			t.Fatalf("answered after %v, want at once", took)
		}
		res.want(t, 503, CodeUnpredictable)
		retryAfter, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if err != nil || retryAfter < 1 {
			t.Fatalf("Retry-After %q, want whole seconds", res.Header.Get("Retry-After"))
		}

		j.down.Store(false)
		time.Sleep(time.Duration(retryAfter) * time.Second)
		(<-b.put(path, amount1000)).want(t, 200, "")
		<-first // whatever it got, it settled nothing twice
		if got := mtis(b.sim.Received()); !slices.Equal(got, []string{"0100"}) {
			t.Fatalf("issuer received %v, want one authorization", got)
		}
		key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "down"}
		if got := storedEvents(t, mem, key); !slices.Equal(got,
			[]string{"payment.SettlementAccepted", "payment.SettlementSuccessConfirmed"}) {
			t.Fatalf("events %v", got)
		}
	})
}

// newBubbleClusterAPI runs the payment entities on two nodes, a and b, of
// an in-process cluster sharing journal j (which keeps its events in mem);
// the API is a's. It returns each node's region.
func newBubbleClusterAPI(t *testing.T, settings Settings, j journal.Journal, mem *memory.Journal) (*bubbleAPI, map[string]*sharding.Region[Command]) {
	t.Helper()
	sim := NewSimulator()
	tables := NewMemoryTables()
	SeedDemo(tables)
	c := sharding.NewInProcessCluster()
	regions := map[string]*sharding.Region[Command]{}
	for _, name := range []string{"a", "b"} {
		sys, err := entity.NewSystem(entity.Config{NodeID: name, Codec: testRegistry(), Journal: j, ForceSerialization: true, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := c.Join(sys)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(sh.Terminate)
		p := &Payments{Settings: settings, Issuer: simulatedIssuer(sim, nil), Credentials: tables, Sequences: tables}
		if regions[name], err = InitPayments(sh, p, 2); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		// Calls to the issuer outlive their entities (issuing.go): let
		// those still running end, on the fake clock, before the bubble does.
		sim.Close()
		time.Sleep(time.Hour)
	})
	api := &API{Payments: regions["a"], Auth: StubAuthorizer{}, AskTimeout: settings.AskTimeout, Log: quietLogger()}
	return &bubbleAPI{handler: api.Handler(), sim: sim, journal: mem}, regions
}

// An entity that is unavailable on another node is answered as one on
// this node: 503 with Retry-After at once, not 500.
func TestAPIUnavailableOnAnotherNode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mem, _ := remindingJournal()
		j := &downJournal{Journal: mem}
		b, regions := newBubbleClusterAPI(t, DefaultSettings(), j, mem)
		// Payments through a until some shard lives on b.
		for i := 0; len(regions["b"].State().Shards) == 0; i++ {
			if i == 20 {
				t.Fatal("no shard on b after 20 payments")
			}
			(<-b.put(fmt.Sprintf("shop-1/warm%d/payment", i), amount1000)).want(t, 200, "")
		}
		// A new payment whose shard lives on b.
		order := ""
		for i := 0; order == ""; i++ {
			if i == 10000 {
				t.Fatal("no order id falls in b's shards")
			}
			id := fmt.Sprintf("remote%d", i)
			key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: id}
			if _, onB := regions["b"].State().Shards[regions["a"].ShardID(key.EntityID())]; onB {
				order = id
			}
		}
		path := "shop-1/" + order + "/payment"

		j.down.Store(true)
		retryAfter := 0
		// The first fails to recover on b; the second finds it backing off.
		for _, ask := range []string{"recovering", "backing off"} {
			start := time.Now()
			res := <-b.put(path, amount1000)
			if took := time.Since(start); took != 0 {
				t.Fatalf("%s: answered after %v, want at once", ask, took)
			}
			if res.Status != 503 || res.Body["code"] != string(CodeUnpredictable) {
				t.Fatalf("%s: got %d %v, want 503 %q", ask, res.Status, res.Body, CodeUnpredictable)
			}
			var err error
			if retryAfter, err = strconv.Atoi(res.Header.Get("Retry-After")); err != nil || retryAfter < 1 {
				t.Fatalf("%s: Retry-After %q, want whole seconds", ask, res.Header.Get("Retry-After"))
			}
		}

		j.down.Store(false)
		time.Sleep(time.Duration(retryAfter) * time.Second)
		(<-b.put(path, amount1000)).want(t, 200, "")
		id := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: order}.EntityID()
		if got := regions["b"].State().Shards[regions["b"].ShardID(id)]; !slices.Contains(got, id) {
			t.Fatalf("the payment ran off b: b's shard holds %v", got)
		}
	})
}
