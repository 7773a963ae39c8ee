package main

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/journal"
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

func (j *downJournal) WriteAsyncWithSide(evs []journal.Event, side journal.Side, done func(error)) {
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
