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
// and the ratios of the last two to raw. The three alternate in ten rounds
// (each projection resumes where its last Run stopped, Settings.StopAtEnd),
// so that a change of the machine's load weighs on each alike. Run it with
// a fixed count:
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
	hit := func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := tx.Exec(ctx, `UPDATE hits SET n = n + 1 WHERE id = $1`, id)
		return err
	}
	project := func(name string, h projection.Handler[Added]) *projection.Projection {
		s := projection.DefaultSettings()
		s.StopAtEnd = true
		p, err := projection.New(projection.Config{Name: name, EntityType: "Counter", Slices: journal.AllSlices,
			Source: c.src, Codec: c.reg, Settings: s}, h)
		if err != nil {
			b.Fatal(err)
		}
		return p
	}
	single := project("single", postgres.ExactlyOnce(c.store, func(ctx context.Context, tx pgx.Tx, env projection.Envelope[Added]) error {
		return hit(ctx, tx, env.PersistenceID)
	}, nil))
	grouped := project("grouped", postgres.ExactlyOnceGrouped(c.store, 100, func(ctx context.Context, tx pgx.Tx, envs []projection.Envelope[Added]) error {
		for _, e := range envs {
			if err := hit(ctx, tx, e.PersistenceID); err != nil {
				return err
			}
		}
		return nil
	}, nil))
	b.ResetTimer()

	// Rounds alternate the three, each first in turn, so that a change of the machine's load
	// during the run weighs on each alike.
	const rounds = 10
	var rawTime, singleTime, groupedTime time.Duration
	timed := func(sum *time.Duration, fn func()) {
		began := time.Now()
		fn()
		*sum += time.Since(began)
	}
	for round := range rounds {
		from := len(c.src.Events())
		for i := round * b.N / rounds; i < (round+1)*b.N/rounds; i++ {
			c.add(fmt.Sprintf("c%d", i%rows), 1)
		}
		events := c.src.Events()[from:]
		runRaw := func() {
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
		}
		runProjection := func(p *projection.Projection) func() {
			return func() {
				if err := p.Run(ctx); err != nil {
					b.Fatal(err)
				}
			}
		}
		phases := []func(){
			func() { timed(&rawTime, runRaw) },
			func() { timed(&singleTime, runProjection(single)) },
			func() { timed(&groupedTime, runProjection(grouped)) },
		}
		for i := range phases { // each goes first in some rounds
			phases[(i+round)%len(phases)]()
		}
	}
	for _, p := range []*projection.Projection{single, grouped} {
		if st := p.Status(); st.Handled != uint64(b.N) {
			b.Fatalf("%s handled %d of %d", p.Instance(), st.Handled, b.N)
		}
	}
	b.StopTimer()

	var total int64
	if err := pool.QueryRow(ctx, `SELECT sum(n) FROM hits`).Scan(&total); err != nil || total != 3*int64(b.N) {
		b.Fatalf("hits sum %d (%v), want 3 x %d", total, err, b.N)
	}
	rate := func(d time.Duration) float64 { return float64(b.N) / d.Seconds() }
	raw := rate(rawTime)
	b.ReportMetric(raw, "raw-events/s")
	b.ReportMetric(rate(singleTime), "events/s")
	b.ReportMetric(rate(groupedTime), "grouped-events/s")
	b.ReportMetric(rate(singleTime)/raw, "ratio-to-raw")
	b.ReportMetric(rate(groupedTime)/raw, "grouped-ratio-to-raw")
}

// BenchmarkHeartbeatVsRenew measures what a ControlStore heartbeat (the
// renewal, the report and the pending requests, in one transaction) costs
// against the plain Renew it replaces, alternating in ten rounds on one
// instance row with two pending requests:
//
//	go test -run '^$' -bench HeartbeatVsRenew -benchtime 1000x -count 3 ./projection/postgres
func BenchmarkHeartbeatVsRenew(b *testing.B) {
	ctx := context.Background()
	store := postgres.NewStore(pgtest.NewPool(b, pg.MigratedDSN(b), nil))
	inst := projection.Instance{Name: "bench", Slices: journal.AllSlices}
	claim, err := store.Acquire(ctx, inst, "h", time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	for range 2 {
		if _, err := store.Request(ctx, inst, projection.OpPause, journal.Offset{}); err != nil {
			b.Fatal(err)
		}
	}
	rep := projection.Report{Offset: journal.Offset{Kind: "postgres", Tx: 1, Pos: 99}, LastEventTime: time.Now(), LagEvents: 3}
	var renew, beat time.Duration
	const rounds = 10
	b.ResetTimer()
	for round := range rounds {
		n := b.N / rounds
		if round == rounds-1 {
			n = b.N - n*(rounds-1)
		}
		start := time.Now()
		for range n {
			if err := store.Renew(ctx, claim.Fence, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		renew += time.Since(start)
		start = time.Now()
		for range n {
			if got, err := store.Heartbeat(ctx, claim.Fence, time.Minute, rep); err != nil || len(got) != 2 {
				b.Fatal(len(got), err)
			}
		}
		beat += time.Since(start)
	}
	b.ReportMetric(float64(renew.Microseconds())/float64(b.N), "renew-µs/op")
	b.ReportMetric(float64(beat.Microseconds())/float64(b.N), "heartbeat-µs/op")
	b.ReportMetric(float64(beat)/float64(renew), "heartbeat/renew")
}
