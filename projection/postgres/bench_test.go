package postgres_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/shoal-dev/shoal/internal/pgtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/postgres"
)

// BenchmarkExactlyOnceVsRaw measures, in one run on one fsync-on server
// (SHOAL_BENCH_FSYNC=off: the tests' server), b.N events projected into
// 100 counter rows, one UPDATE per event:
//
//	raw-events/s      a pgx loop doing per event what exactly-once must:
//	                  BEGIN; UPDATE the counter; UPDATE an offset row; COMMIT
//	events/s          projection/postgres.ExactlyOnce (one transaction per event)
//	grouped-events/s  ExactlyOnceGrouped, up to 100 events per transaction
//
// and the ratios of the last two to raw. Run it with a fixed count:
//
//	go test -run '^$' -bench ExactlyOnceVsRaw -benchtime 2000x -count 3 ./projection/postgres
func BenchmarkExactlyOnceVsRaw(b *testing.B) {
	srv := pgBench
	if os.Getenv("SHOAL_BENCH_FSYNC") == "off" {
		srv = pg
	}
	ctx := context.Background()
	pool := pgtest.NewPool(b, srv.MigratedDSN(b), nil)
	c := newCounters(b, pool)
	const rows = 100
	if _, err := pool.Exec(ctx, `CREATE TABLE hits (id text PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO hits SELECT 'Counter|c' || i, 0 FROM generate_series(0, 99) i;
		INSERT INTO projection_offsets (projection_name, instance_key, epoch, holder, expires_at) VALUES ('raw', 'raw', 1, 'raw', 'infinity')`); err != nil {
		b.Fatal(err)
	}
	for i := range b.N {
		c.add(fmt.Sprintf("c%d", i%rows), 1)
	}
	events := c.src.Events()
	hit := func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := tx.Exec(ctx, `UPDATE hits SET n = n + 1 WHERE id = $1`, id)
		return err
	}
	b.ResetTimer()

	began := time.Now()
	for _, e := range events {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if err := hit(ctx, tx, e.PersistenceID); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `UPDATE projection_offsets SET "offset" = $1, updated_at = clock_timestamp()
				WHERE projection_name = 'raw' AND instance_key = 'raw' AND epoch = 1`, e.Offset.String())
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	raw := float64(b.N) / time.Since(began).Seconds()

	rate := func(name string, h projection.Handler[Added]) float64 {
		s := projection.DefaultSettings()
		s.StopAtEnd = true
		p, err := projection.New(projection.Config{Name: name, EntityType: "Counter", Slices: journal.AllSlices,
			Source: c.src, Codec: c.reg, Settings: s}, h)
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := p.Run(ctx); err != nil {
			b.Fatal(err)
		}
		elapsed := time.Since(began)
		if st := p.Status(); st.Handled != uint64(b.N) {
			b.Fatalf("%s handled %d of %d", name, st.Handled, b.N)
		}
		return float64(b.N) / elapsed.Seconds()
	}
	single := rate("single", postgres.ExactlyOnce(c.store, func(ctx context.Context, tx pgx.Tx, env projection.Envelope[Added]) error {
		return hit(ctx, tx, env.PersistenceID)
	}, nil))
	grouped := rate("grouped", postgres.ExactlyOnceGrouped(c.store, 100, func(ctx context.Context, tx pgx.Tx, envs []projection.Envelope[Added]) error {
		for _, e := range envs {
			if err := hit(ctx, tx, e.PersistenceID); err != nil {
				return err
			}
		}
		return nil
	}, nil))
	b.StopTimer()

	var total int64
	if err := pool.QueryRow(ctx, `SELECT sum(n) FROM hits`).Scan(&total); err != nil || total != 3*int64(b.N) {
		b.Fatalf("hits sum %d (%v), want 3 x %d", total, err, b.N)
	}
	b.ReportMetric(raw, "raw-events/s")
	b.ReportMetric(single, "events/s")
	b.ReportMetric(grouped, "grouped-events/s")
	b.ReportMetric(single/raw, "ratio-to-raw")
	b.ReportMetric(grouped/raw, "grouped-ratio-to-raw")
}
