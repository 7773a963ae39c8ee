package sharding_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	jrnl "github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
)

// unreachableJournal is a memory journal whose reads fail, as a journal
// does while its database restarts.
type unreachableJournal struct{ jrnl.Journal }

var errJournalUnreachable = errors.New("journal unreachable")

func (unreachableJournal) Replay(context.Context, string, uint64, uint64, func(jrnl.Event) error) error {
	return errJournalUnreachable
}

func (unreachableJournal) HighestSeqNr(context.Context, string) (uint64, error) {
	return 0, errJournalUnreachable
}

type (
	ledgerCmd   interface{ isLedgerCmd() }
	ledgerGet   struct{ ReplyTo entity.ReplyTo[int] }
	ledgerEvent struct{}
)

func (ledgerGet) isLedgerCmd() {}

var ledgerKey = entity.NewTypeKey[ledgerCmd]("Ledger")

func newLedger(ec entity.Context[ledgerCmd]) entity.Behavior[ledgerCmd] {
	return eventsourced.New(eventsourced.Config[ledgerCmd, ledgerEvent, int]{
		PersistenceID: eventsourced.PersistenceIDOf(ledgerKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[ledgerCmd, ledgerEvent, int], n int, c ledgerCmd) eventsourced.Effect[ledgerEvent, int] {
			return ctx.Reply(eventsourced.To(c.(ledgerGet).ReplyTo, n))
		},
		OnEvent: func(_ eventsourced.Context[ledgerCmd], n int, _ ledgerEvent) int { return n + 1 },
	})
}

// Asks to entities whose recovery fails (their journal unreachable, as
// while Postgres restarts) fail at once with ErrEntityUnavailable, through
// the node that hosts the shard and through another: they must not wait
// for their deadline (an hour here; synctest would report that wait as a
// deadline error, not a pass).
func TestAskOfAnEntityThatCannotRecoverIsUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cluster := sharding.NewInProcessCluster()
		j := unreachableJournal{memory.New()}
		var nodes []*sharding.Sharding
		reg := codec.NewRegistry()
		codec.MustRegister[ledgerEvent](reg, "ledger.event")
		codec.MustRegister[ledgerGet](reg, "ledger.get") // asked across nodes
		codec.MustRegister[int](reg, "ledger.count")
		for _, name := range []string{"a", "b"} {
			sys, err := entity.NewSystem(entity.Config{NodeID: name, Journal: j, Codec: reg, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			n, err := cluster.Join(sys)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sharding.Init(n, sharding.Entity[ledgerCmd]{Key: ledgerKey, Create: newLedger}); err != nil {
				t.Fatal(err)
			}
			nodes = append(nodes, n)
		}
		for i, n := range nodes {
			for _, id := range []string{"l-1", "l-2", "l-3", "l-4"} {
				ref, err := sharding.EntityRefFor(n, ledgerKey, id)
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
				start := time.Now()
				_, err = entity.Ask(ctx, ref, func(r entity.ReplyTo[int]) ledgerCmd { return ledgerGet{ReplyTo: r} })
				cancel()
				if !errors.Is(err, sharding.ErrEntityUnavailable) {
					t.Fatalf("ask of %s through node %d: %v, want ErrEntityUnavailable", id, i, err)
				}
				if waited := time.Since(start); waited != 0 {
					t.Fatalf("ask of %s through node %d failed after %v, want at once", id, i, waited)
				}
			}
		}
		for _, n := range nodes {
			_ = n.Shutdown(context.Background())
		}
	})
}
