package lease_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster/lease"
)

// fencingRun simulates one node renewing its lease in a store over lossy,
// slow links, the node's clock running at rate times the store's. It
// reports whether the lease expired, and describes the first moment at
// which the store said the lease had expired while the node's Keeper still
// let it act: the invariant self-fencing rests on (a node has fenced itself
// before its shards may move elsewhere).
// Time moves in 10 ms steps; everything random comes from seed.
func fencingRun(seed uint64, rate float64, tm lease.Timing) (expired bool, violation string) {
	rng := rand.New(rand.NewPCG(seed, 1))
	storeNow := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	origin := storeNow
	nodeNow := func() time.Time { // the node's monotonic clock, drifting
		return origin.Add(time.Duration(float64(storeNow.Sub(origin)) * rate))
	}
	store := lease.NewMemoryStore(func() time.Time { return storeNow })
	ctx := context.Background()

	type renewal struct {
		start            time.Time // node time when sent
		arrive, answered time.Time // store times
		lost, ok         bool
		applied          bool
	}
	k := lease.NewKeeper(tm)
	if err := store.AcquireNode(ctx, node, tm.Length); err != nil {
		return false, err.Error()
	}
	k.Granted(nodeNow(), nodeNow())
	var inFlight *renewal
	latency := func() time.Duration { return time.Duration(rng.Int64N(int64(2 * time.Second))) }
	outage := false
	for step := 0; step < 20_000; step++ { // 200 s
		storeNow = storeNow.Add(10 * time.Millisecond)
		if step%500 == 0 {
			outage = rng.IntN(3) == 0 // a third of the time the store is cut off
		}
		now := nodeNow()
		if inFlight == nil && !k.Fenced(now) && !now.Before(k.RenewAt()) {
			l1, l2 := latency(), latency()
			inFlight = &renewal{start: now, arrive: storeNow.Add(l1), answered: storeNow.Add(l1 + l2), lost: outage || rng.IntN(10) == 0}
		}
		if r := inFlight; r != nil {
			if !r.applied && !r.lost && !storeNow.Before(r.arrive) {
				r.applied = true
				r.ok = store.RenewNode(ctx, node, tm.Length) == nil
			}
			if !storeNow.Before(r.answered) {
				if r.ok {
					k.Granted(r.start, now)
				}
				inFlight = nil
			}
		}
		expired, err := store.NodeLeaseExpired(ctx, node)
		if err != nil {
			return false, err.Error()
		}
		if expired && k.Holds(now) {
			return true, fmt.Sprintf("at %v the store's lease had expired but the node still held it (fence at %v node time)",
				storeNow.Sub(origin), k.FenceAt().Sub(origin))
		}
		if expired {
			return true, "" // fenced before expiry; nothing more to see
		}
	}
	return false, ""
}

// With clocks drifting apart by up to 1% (far beyond real quartz), slow
// and lost renewals and store outages, the node always fences itself
// before the store's lease expires.
func TestNodeFencesBeforeStoreExpiry(t *testing.T) {
	tm := lease.DefaultSettings().Node
	expiries := 0
	for seed := range uint64(200) {
		rate := 0.99 + 0.02*rand.New(rand.NewPCG(seed, 2)).Float64()
		expired, v := fencingRun(seed, rate, tm)
		if v != "" {
			t.Fatalf("seed %d, rate %.4f: %s", seed, rate, v)
		}
		if expired {
			expiries++
		}
	}
	// Enough runs reach an expiry for the check to mean something.
	if expiries < 50 {
		t.Fatalf("only %d of 200 runs reached an expiry", expiries)
	}
	t.Logf("%d of 200 runs reached an expiry, every one fenced first", expiries)
}

// The check can fail: a node clock slower than the margin allows
// (Margin/Length = 20%, here 30% slow) keeps acting after expiry.
func TestFencingSimulationDetectsTooSmallMargin(t *testing.T) {
	tm := lease.DefaultSettings().Node
	for seed := range uint64(50) {
		if _, v := fencingRun(seed, 0.7, tm); v != "" {
			return
		}
	}
	t.Fatal("no seed caught a node whose clock runs 30% slow: the simulation cannot fail")
}
