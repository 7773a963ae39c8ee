package readmodel

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	projectionpg "github.com/shoal-dev/shoal/projection/postgres"
)

// This file checks a Postgres read model against the journal it was made
// from: the example's tests and its container fault suite (clustertest)
// run it after every scenario.

// FoldJournal reads every payment event of the journal table (the
// event_journal of Shoal's migrations, on pool's search path) and folds
// it with Apply: the read model as it must be once the projection caught
// up.
func FoldJournal(ctx context.Context, pool *pgxpool.Pool) (map[Key]Settlement, error) {
	rows, err := pool.Query(ctx, `SELECT persistence_id, seq_nr, write_timestamp, manifest, payload FROM event_journal
		WHERE persistence_id LIKE $1 ORDER BY persistence_id, seq_nr`, EntityType+"|%")
	if err != nil {
		return nil, fmt.Errorf("readmodel: read the journal: %w", err)
	}
	out := make(map[Key]Settlement)
	var (
		pid      string
		seq      int64
		ts       time.Time
		manifest string
		payload  []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&pid, &seq, &ts, &manifest, &payload}, func() error {
		vs, err := Decode(manifest, payload)
		if err != nil {
			return fmt.Errorf("%s seq %d: %w", pid, seq, err)
		}
		for _, v := range vs {
			e, err := NewEvent(pid, uint64(seq), ts, v.(Change))
			if err != nil {
				return err
			}
			s, err := Apply(out[e.Key], e)
			if err != nil {
				return err
			}
			out[e.Key] = s
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("readmodel: fold the journal: %w", err)
	}
	return out, nil
}

// CaughtUp returns, for each of the projection's instances (name over
// journal.SplitSlices(instances)) whose stored offset is behind the last
// payment event of its slices, why; none when all caught up. It needs the
// journal's query columns (entity_type, slice, tx_id).
func CaughtUp(ctx context.Context, pool *pgxpool.Pool, name string, instances int) ([]string, error) {
	ranges, err := journal.SplitSlices(instances)
	if err != nil {
		return nil, err
	}
	store := projectionpg.NewStore(pool)
	var behind []string
	for _, r := range ranges {
		inst := projection.Instance{Name: name, Slices: r}
		var end journal.Offset
		err := pool.QueryRow(ctx, `SELECT tx_id::text::int8, ordering FROM event_journal
			WHERE entity_type = $1 AND slice BETWEEN $2 AND $3 ORDER BY tx_id DESC, ordering DESC LIMIT 1`,
			EntityType, r.Min, r.Max).Scan(&end.Tx, &end.Pos)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // no events: nothing to catch up with
		}
		if err != nil {
			return nil, fmt.Errorf("readmodel: journal end of %s: %w", inst, err)
		}
		off, ok, err := store.Offset(ctx, inst)
		if err != nil {
			return nil, err
		}
		if !ok || off.Less(end) {
			behind = append(behind, fmt.Sprintf("%s at %s, journal at %d:%d", inst, off, end.Tx, end.Pos))
		}
	}
	return behind, nil
}

// Compare reports how a kept read model (its settlements and totals)
// differs from folded, the fold of the journal; nil when it does not.
// Timestamps are compared at Postgres's precision; totals that are all
// zero count as absent.
func Compare(folded, settlements map[Key]Settlement, totals map[ShopKey]Totals) error {
	var diffs []string
	for k, want := range folded {
		got, ok := settlements[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: missing, want %s", k, show(want)))
		case got.State != want.State || got.Amount != want.Amount || got.SeqNr != want.SeqNr || got.Slice != want.Slice ||
			!UTC(got.UpdatedAt).Equal(UTC(want.UpdatedAt)):
			diffs = append(diffs, fmt.Sprintf("%s: %s, want %s", k, show(got), show(want)))
		}
	}
	for k, got := range settlements {
		if _, ok := folded[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %s, not in the journal", k, show(got)))
		}
	}
	wantTotals := TotalsOf(folded)
	for k, want := range wantTotals {
		if got := totals[k]; got != want {
			diffs = append(diffs, fmt.Sprintf("totals of %v: %+v, want %+v", k, got, want))
		}
	}
	for k, got := range totals {
		if _, ok := wantTotals[k]; !ok && got != (Totals{}) {
			diffs = append(diffs, fmt.Sprintf("totals of %v: %+v, no settlement in the journal", k, got))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	const most = 20
	if len(diffs) > most {
		diffs = append(diffs[:most], fmt.Sprintf("… and %d more", len(diffs)-most))
	}
	return fmt.Errorf("%w: %d settlements in the journal:\n%s", ErrDiffers, len(folded), strings.Join(diffs, "\n"))
}

// ErrDiffers means the read model is not the fold of the journal.
var ErrDiffers = errors.New("readmodel: the read model differs from the fold of the journal")

func show(s Settlement) string {
	return fmt.Sprintf("%s %d seq %d at %s", s.State, s.Amount, s.SeqNr, UTC(s.UpdatedAt).Format(time.RFC3339Nano))
}

// Check compares the Postgres read model with the fold of the journal once
// the projection (name, over journal.SplitSlices(instances)) caught up:
// nil when it did and they agree.
func Check(ctx context.Context, pool *pgxpool.Pool, name string, instances int) error {
	behind, err := CaughtUp(ctx, pool, name, instances)
	if err != nil {
		return err
	}
	if len(behind) > 0 {
		return fmt.Errorf("%w: %s", ErrBehind, strings.Join(behind, "; "))
	}
	folded, err := FoldJournal(ctx, pool)
	if err != nil {
		return err
	}
	settlements, totals, err := (&Postgres{pool: pool}).All(ctx)
	if err != nil {
		return err
	}
	return Compare(folded, settlements, totals)
}

// ErrBehind means the projection has not handled every event yet.
var ErrBehind = errors.New("readmodel: the projection is behind the journal")

// WaitConsistent runs Check every poll until it passes or ctx ends; then
// it returns Check's last error. Writes may go on while it waits (an
// entity's processing timeout, say): each round reads the journal anew.
func WaitConsistent(ctx context.Context, pool *pgxpool.Pool, name string, instances int, poll time.Duration) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	var last error
	for {
		err := Check(ctx, pool, name, instances)
		if err == nil {
			return nil
		}
		if ctx.Err() == nil || last == nil {
			last = err // not the deadline's own error, when there is a better one
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("readmodel: not consistent with the journal by the deadline: %w", last)
		case <-t.C:
		}
	}
}
