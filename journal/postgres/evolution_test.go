package postgres_test

// Schema evolution on a real PostgreSQL (docs/DESIGN.md, Schema evolution):
// rows written by older versions of an entity, under old manifests and in
// old shapes, recover through the codec's aliases and upcasters, and the
// entity writes on at the next stored seq nr.

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/postgres"
)

type walletCmd interface{ isWalletCmd() }

type (
	credit struct {
		Cents   int64
		ReplyTo entity.ReplyTo[walletState]
	}
	balance struct{ ReplyTo entity.ReplyTo[walletState] }
)

func (credit) isWalletCmd()  {}
func (balance) isWalletCmd() {}

type walletEvent interface{ isWalletEvent() }

type (
	credited struct{ Cents int64 }
	debited  struct{ Cents int64 }
)

func (credited) isWalletEvent() {}
func (debited) isWalletEvent()  {}

// walletState is the balance and the trail of events that made it, each
// with the seq nr it was applied after.
type walletState struct {
	Cents int64
	Trail []string
}

// Old shapes, only ever read.
type (
	creditV1   struct{ Units int64 }             // whole units, not cents
	transferV1 struct{ InCents, FeeCents int64 } // a credit and its fee in one event
)

var walletKey = entity.NewTypeKey[walletCmd]("Wallet")

func walletCodec() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[credit](r, "wallet.Credit")
	codec.MustRegister[balance](r, "wallet.Balance")
	codec.MustRegister[credited](r, "wallet.Credited", codec.Aliases("wallet.Deposited"))
	codec.MustRegister[debited](r, "wallet.Debited")
	codec.MustRegister[walletState](r, "wallet.State")
	codec.MustUpcast(r, "wallet.Credited/v1", func(old creditV1) []any { return []any{credited{Cents: old.Units * 100}} })
	codec.MustUpcast(r, "wallet.Transfer/v1", func(old transferV1) []any {
		return []any{credited{Cents: old.InCents}, debited{Cents: old.FeeCents}}
	})
	codec.MustRegisterUpcaster(r, "wallet.Audited", func([]byte) ([]any, error) { return nil, nil })
	return r
}

func wallet(ec entity.Context[walletCmd]) entity.Behavior[walletCmd] {
	type eff = eventsourced.Effect[walletEvent, walletState]
	return eventsourced.New(eventsourced.Config[walletCmd, walletEvent, walletState]{
		PersistenceID: eventsourced.PersistenceIDOf(walletKey, ec.EntityID()),
		OnCommand: func(ctx eventsourced.CommandContext[walletCmd, walletEvent, walletState], s walletState, c walletCmd) eff {
			switch c := c.(type) {
			case credit:
				return ctx.Persist(credited{Cents: c.Cents}).
					ThenReplyFrom(func(s walletState) eventsourced.Answer { return eventsourced.To(c.ReplyTo, s) })
			case balance:
				return ctx.Reply(eventsourced.To(c.ReplyTo, s))
			}
			return ctx.Unhandled()
		},
		OnEvent: func(ctx eventsourced.Context[walletCmd], s walletState, e walletEvent) walletState {
			s.Trail = slices.Clone(s.Trail)
			switch e := e.(type) {
			case credited:
				s.Cents += e.Cents
				s.Trail = append(s.Trail, "+"+itoa(e.Cents)+"@"+itoa(int64(ctx.LastSeqNr())))
			case debited:
				s.Cents -= e.Cents
				s.Trail = append(s.Trail, "-"+itoa(e.Cents)+"@"+itoa(int64(ctx.LastSeqNr())))
			}
			return s
		},
		ReplayBatch: 2, // a split row crosses a page
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestRecoveryReadsOldRowsFromPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	j := postgres.New(pg.Pool(t), postgres.Config{})
	t.Cleanup(func() { _ = j.Close() })

	const pid = "Wallet|w-1"
	old := []struct{ manifest, payload string }{
		{"wallet.Deposited", `{"Cents":500}`},                    // 1: renamed manifest
		{"wallet.Transfer/v1", `{"InCents":1000,"FeeCents":30}`}, // 2: one to two
		{"wallet.Audited", `{"By":"ops"}`},                       // 3: dropped
		{"wallet.Credited/v1", `{"Units":2}`},                    // 4: one to one, units to cents
		{"wallet.Credited", `{"Cents":1}`},                       // 5: today's form
		{"wallet.Audited", `{}`},                                 // 6: dropped, the last row
	}
	for i, r := range old {
		ev := journal.Event{PersistenceID: pid, SeqNr: uint64(i + 1), Manifest: r.manifest, Payload: []byte(r.payload),
			WriterID: "wallet-service-v1", Timestamp: time.Now()}
		if err := j.Write(ctx, []journal.Event{ev}); err != nil {
			t.Fatal(err)
		}
	}

	sys, err := entity.NewSystem(entity.Config{Codec: walletCodec(), Journal: j, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	props := &entity.Props[walletCmd]{Key: walletKey, Create: wallet}
	cell := entity.Spawn(sys, props, "w-1")
	got, err := entity.Ask(ctx, cell, func(r entity.ReplyTo[walletState]) walletCmd { return balance{ReplyTo: r} })
	if err != nil {
		t.Fatal(err)
	}
	wantTrail := []string{"+500@0", "+1000@1", "-30@2", "+200@3", "+1@4"}
	if got.Cents != 1671 || !slices.Equal(got.Trail, wantTrail) {
		t.Fatalf("recovered %+v, want 1671 cents from %q", got, wantTrail)
	}

	got, err = entity.Ask(ctx, cell, func(r entity.ReplyTo[walletState]) walletCmd { return credit{Cents: 9, ReplyTo: r} })
	if err != nil || got.Cents != 1680 || got.Trail[len(got.Trail)-1] != "+9@6" {
		t.Fatalf("credit after recovery = %+v, %v; want 1680 cents, applied after seq 6", got, err)
	}
	var stored []journal.Event
	if err := j.Replay(ctx, pid, 1, 100, func(ev journal.Event) error { stored = append(stored, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	if n := len(stored); n != len(old)+1 || stored[n-1].SeqNr != 7 || stored[n-1].Manifest != "wallet.Credited" {
		t.Fatalf("stored %d rows, last %+v; want the old rows and one at seq 7 under today's manifest", n, stored[n-1])
	}
	for i, r := range old { // the old rows are read as they were, never rewritten
		if stored[i].Manifest != r.manifest || string(stored[i].Payload) != r.payload {
			t.Fatalf("row %d is now %q %s, want %q %s", i+1, stored[i].Manifest, stored[i].Payload, r.manifest, r.payload)
		}
	}

	// Old rows and new recover alike on the next start.
	cell.StopNow()
	<-cell.Done()
	again := entity.Spawn(sys, props, "w-1")
	got, err = entity.Ask(ctx, again, func(r entity.ReplyTo[walletState]) walletCmd { return balance{ReplyTo: r} })
	if err != nil || got.Cents != 1680 || len(got.Trail) != len(wantTrail)+1 {
		t.Fatalf("second recovery = %+v, %v", got, err)
	}
}
