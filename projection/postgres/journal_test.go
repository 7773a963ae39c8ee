package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/journal"
	journalpg "github.com/shoal-dev/shoal/journal/postgres"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/postgres"
)

// The whole read side on one real database: four exactly-once instances
// follow the Postgres journal's live queries while writers commit through
// its group commit and one transaction stays open across many later
// commits. Once the writers are done and that transaction committed, every
// instance has counted every event once: the read model equals the fold.
func TestExactlyOnceOverThePostgresJournal(t *testing.T) {
	ctx := context.Background()
	pool := pg.Pool(t)
	c := newCounters(t, pool)
	j := journalpg.New(pool, journalpg.Config{QueryPollInterval: 50 * time.Millisecond})
	t.Cleanup(func() { _ = j.Close() })

	ranges, err := journal.SplitSlices(4)
	if err != nil {
		t.Fatal(err)
	}
	var runs []*running
	for _, r := range ranges {
		cfg := projection.Config{Name: "counters", EntityType: "Counter", Slices: r, Source: j, Codec: c.reg, Settings: settings()}
		p, err := projection.New(cfg, postgres.ExactlyOnce(c.store, apply, clearCounters))
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, run(p))
	}

	var mu sync.Mutex
	fold := map[string][2]int64{}
	record := func(pid string, n int) {
		mu.Lock()
		f := fold[pid]
		fold[pid] = [2]int64{f[0] + int64(n), f[1] + 1}
		mu.Unlock()
	}
	event := func(pid string, seq uint64, n int) journal.Event {
		m, payload, err := c.reg.Encode(Added{N: n})
		if err != nil {
			t.Fatal(err)
		}
		return journal.Event{PersistenceID: pid, SeqNr: seq, Manifest: m, Payload: payload, Timestamp: time.Now(), WriterID: "w"}
	}

	// The slow writer: its row is stored first and committed last.
	slow, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slowPid := "Counter|slow"
	if _, err := slow.Exec(ctx, `INSERT INTO event_journal (persistence_id, seq_nr, write_timestamp, manifest, payload, writer_id, entity_type, slice)
		VALUES ($1, 1, now(), 'added', '{"N":1000}', 'slow', 'Counter', $2)`, slowPid, journal.SliceOf(slowPid)); err != nil {
		t.Fatal(err)
	}

	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 40 {
				pid := fmt.Sprintf("Counter|w%d-%d", w, i%5)
				if err := j.Write(ctx, []journal.Event{event(pid, uint64(i/5+1), i)}); err != nil {
					t.Error(err)
					return
				}
				record(pid, i)
			}
		}()
	}
	wg.Wait()
	if err := slow.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	record(slowPid, 1000)

	caughtUp := func() bool {
		for _, r := range ranges {
			off, _, err := c.store.Offset(ctx, projection.Instance{Name: "counters", Slices: r})
			if err != nil {
				t.Fatal(err)
			}
			n, err := j.CountEventsBySlices(ctx, "Counter", r, off)
			if err != nil {
				t.Fatal(err)
			}
			if n > 0 {
				return false
			}
		}
		return true
	}
	poll(t, "every instance to reach the journal's end", caughtUp)
	for _, r := range runs {
		if err := r.stop(); err != nil {
			t.Errorf("run ended with %v", err)
		}
	}
	c.check(fold)
}
