package projection_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/metrics/metricstest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/projection"
	"github.com/shoal-dev/shoal/projection/projectiontest"
)

type Added struct{ N int }

func registry(t *testing.T) *codec.Registry {
	t.Helper()
	reg := codec.NewRegistry()
	codec.MustRegister[Added](reg, "added")
	return reg
}

// fixture is a source, a memory store and what a handler saw.
type fixture struct {
	t     *testing.T
	reg   *codec.Registry
	src   *projectiontest.Source
	store *projection.MemoryStore
	seqs  map[string]uint64

	mu   sync.Mutex
	seen []string // "pid#seq" in handling order
}

func newFixture(t *testing.T) *fixture {
	return &fixture{t: t, reg: registry(t), src: projectiontest.NewSource(), store: projection.NewMemoryStore(), seqs: map[string]uint64{}}
}

// add appends an Added{n} event of entity pid ("Order|<pid>").
func (f *fixture) add(pid string, n int) journal.Offset {
	f.t.Helper()
	m, payload, err := f.reg.Encode(Added{N: n})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.addRaw(pid, m, payload)
}

func (f *fixture) addRaw(pid, manifest string, payload []byte) journal.Offset {
	pid = "Order|" + pid
	f.seqs[pid]++
	return f.src.Append(journal.Event{PersistenceID: pid, SeqNr: f.seqs[pid], Manifest: manifest, Payload: payload, Timestamp: time.Now(), WriterID: "w"})
}

func (f *fixture) record(env projection.Envelope[Added]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = append(f.seen, fmt.Sprintf("%s#%d", env.PersistenceID, env.SeqNr))
}

func (f *fixture) handled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.seen...)
}

func (f *fixture) config(s projection.Settings) projection.Config {
	return projection.Config{Name: "orders", EntityType: "Order", Slices: journal.AllSlices, Source: f.src, Codec: f.reg, Settings: s}
}

// project returns a projection whose handler records, then calls fn (may be nil).
func (f *fixture) project(s projection.Settings, fn func(projection.Envelope[Added]) error) *projection.Projection {
	f.t.Helper()
	p, err := projection.New(f.config(s), projection.AtLeastOnce(f.store, func(_ context.Context, env projection.Envelope[Added]) error {
		if fn != nil {
			if err := fn(env); err != nil {
				return err
			}
		}
		f.record(env)
		return nil
	}, nil))
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) stored(p *projection.Projection) journal.Offset {
	f.t.Helper()
	off, _, err := f.store.Offset(context.Background(), p.Instance())
	if err != nil {
		f.t.Fatal(err)
	}
	return off
}

// start runs p in the background; stop cancels it and returns Run's
// error (again on later calls).
func start(p *projection.Projection) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	return sync.OnceValue(func() error {
		cancel()
		return <-done
	})
}

func fast() projection.Settings {
	s := projection.DefaultSettings()
	s.Retry.MaxRetries = 2
	return s
}

func TestDeliversEveryEventInOffsetOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		var want []string
		for i := range 30 {
			pid := fmt.Sprintf("o%d", i%4)
			f.add(pid, i)
			want = append(want, fmt.Sprintf("Order|%s#%d", pid, f.seqs["Order|"+pid]))
		}
		f.src.Append(journal.Event{PersistenceID: "Other|x", SeqNr: 1, Manifest: "added", Payload: []byte(`{}`)}) // another type
		s := fast()
		s.StopAtEnd = true
		p := f.project(s, nil)
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.handled(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("handled %v\nwant     %v", got, want)
		}
		last := f.src.Events()[29].Offset
		if got := f.stored(p); got != last {
			t.Fatalf("stored offset %v, want %v", got, last)
		}
		if st := p.Status(); st.Handled != 30 || st.Running || st.Offset != last {
			t.Fatalf("status %+v", st)
		}
	})
}

func TestLiveFollowsAndSavesOnStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		p := f.project(fast(), nil)
		stop := start(p)
		synctest.Wait()
		f.add("a", 1)
		f.add("b", 2)
		synctest.Wait()
		if got := f.handled(); len(got) != 2 {
			t.Fatalf("handled %v, want the 2 events appended while live", got)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
		if got, want := f.stored(p), f.src.Events()[1].Offset; got != want {
			t.Fatalf("offset saved on stop %v, want %v", got, want)
		}
		// A new run resumes after them.
		f.add("c", 3)
		stop = start(p)
		synctest.Wait()
		if got := f.handled(); len(got) != 3 || got[2] != "Order|c#1" {
			t.Fatalf("after restart handled %v", got)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestAtLeastOnceSaveCadence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		s := fast()
		s.SaveEvery, s.SaveInterval = 3, 2*time.Second
		p := f.project(s, nil)
		stop := start(p)
		defer stop()
		synctest.Wait()
		f.add("a", 1)
		f.add("a", 2)
		synctest.Wait()
		if got := f.stored(p); !got.IsStart() {
			t.Fatalf("saved %v after 2 of 3 events and no time", got)
		}
		third := f.add("a", 3)
		synctest.Wait()
		if got := f.stored(p); got != third {
			t.Fatalf("saved %v after the 3rd event, want %v", got, third)
		}
		fourth := f.add("a", 4)
		synctest.Wait()
		time.Sleep(2*time.Second - time.Nanosecond)
		synctest.Wait()
		if got := f.stored(p); got != third {
			t.Fatalf("saved %v before SaveInterval passed, want still %v", got, third)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if got := f.stored(p); got != fourth {
			t.Fatalf("saved %v at SaveInterval, want %v", got, fourth)
		}
		if st := p.Status(); st.SavedOffset != fourth || st.Offset != fourth {
			t.Fatalf("status %+v", st)
		}
	})
}

// TestAtLeastOnceDuplicatesAfterCrash shows the documented duplicates: a
// runner that dies between handling and saving hands those events to the
// next one again.
func TestAtLeastOnceDuplicatesAfterCrash(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		s := fast()
		s.SaveEvery, s.SaveInterval = 100, time.Hour
		s.Holder = "crashing"
		p := f.project(s, nil)
		for i := range 5 {
			f.add("a", i)
		}
		// A crash: the store is not written on the way out, so take the
		// runner's lease from under it first (its stop-time save is fenced).
		stop := start(p)
		synctest.Wait()
		c, err := f.store.Acquire(context.Background(), p.Instance(), "crashing", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := stop(); err != nil && !errors.Is(err, projection.ErrFenced) {
			t.Fatal(err)
		}
		if err := f.store.Release(context.Background(), c.Fence); err != nil {
			t.Fatal(err)
		}
		if got := f.stored(p); !got.IsStart() {
			t.Fatalf("offset %v saved; the test needs a run that saved nothing", got)
		}
		s.Holder, s.StopAtEnd = "next", true
		next := f.project(s, nil)
		if err := next.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := f.handled(); len(got) != 10 {
			t.Fatalf("handled %d times (%v), want each of 5 twice", len(got), got)
		}
	})
}

func TestRetryThenPolicy(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		policy projection.Policy
		panics bool
	}{
		{projection.StopOnFailure, false},
		{projection.SkipOnFailure, false},
		{projection.DeadLetterOnFailure, false},
		{projection.DeadLetterOnFailure, true},
	} {
		t.Run(fmt.Sprintf("%v/panic=%v", tc.policy, tc.panics), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := newFixture(t)
				f.add("a", 1)
				bad := f.add("b", 2)
				f.add("a", 3)
				s := fast()
				s.OnFailure, s.StopAtEnd = tc.policy, true
				reg := prometheus.NewRegistry()
				s.Registerer = reg
				attempts := 0
				p := f.project(s, func(env projection.Envelope[Added]) error {
					if env.Event.N != 2 {
						return nil
					}
					attempts++
					if tc.panics {
						panic("kaput")
					}
					return boom
				})
				err := p.Run(context.Background())
				if attempts != 3 {
					t.Errorf("the failing event was tried %d times, want 1 + MaxRetries 2", attempts)
				}
				labels := map[string]string{"projection": "orders"}
				if got := metricstest.Value(t, reg, "shoal_projection_failures_total", map[string]string{"result": "retried"}); got != 2 {
					t.Errorf("retried metric %v, want 2", got)
				}
				dead, _ := f.store.DeadLetters(context.Background(), p.Instance())
				switch tc.policy {
				case projection.StopOnFailure:
					var he *projection.HandlerError
					if !errors.As(err, &he) || !errors.Is(err, boom) || he.PersistenceID != "Order|b" || he.SeqNr != 1 || he.Offset != bad {
						t.Fatalf("Run = %v, want a HandlerError at Order|b#1 wrapping boom", err)
					}
					if got, want := f.stored(p), f.src.Events()[0].Offset; got != want {
						t.Fatalf("stored %v, want %v: before the failed event", got, want)
					}
					if h := f.handled(); len(h) != 1 {
						t.Fatalf("handled %v, want only the event before", h)
					}
				case projection.SkipOnFailure:
					if err != nil {
						t.Fatal(err)
					}
					if h := f.handled(); strings.Join(h, ",") != "Order|a#1,Order|a#2" {
						t.Fatalf("handled %v", h)
					}
					if len(dead) != 0 || p.Status().Skipped != 1 {
						t.Fatalf("dead letters %v, status %+v", dead, p.Status())
					}
					if got := metricstest.Value(t, reg, "shoal_projection_failures_total", map[string]string{"result": "skipped"}); got != 1 {
						t.Errorf("skipped metric %v", got)
					}
				case projection.DeadLetterOnFailure:
					if err != nil {
						t.Fatal(err)
					}
					if len(dead) != 1 || dead[0].PersistenceID != "Order|b" || dead[0].SeqNr != 1 || dead[0].Manifest != "added" || dead[0].Offset != bad {
						t.Fatalf("dead letters %+v", dead)
					}
					want := "boom"
					if tc.panics {
						want = "kaput"
						if !strings.Contains(dead[0].Error, projection.ErrHandlerPanic.Error()) {
							t.Errorf("dead letter error %q does not say it panicked", dead[0].Error)
						}
					}
					if !strings.Contains(dead[0].Error, want) {
						t.Errorf("dead letter error %q, want it to hold %q", dead[0].Error, want)
					}
					if got, want := f.stored(p), f.src.Events()[2].Offset; got != want {
						t.Fatalf("stored %v, want %v", got, want)
					}
					if got := metricstest.Value(t, reg, "shoal_projection_events_handled_total", labels); got != 2 {
						t.Errorf("handled metric %v, want 2", got)
					}
				}
			})
		})
	}
}

func TestRetrySucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.add("a", 1)
		s := fast()
		s.StopAtEnd = true
		fails := 2
		p := f.project(s, func(projection.Envelope[Added]) error {
			if fails > 0 {
				fails--
				return errors.New("not yet")
			}
			return nil
		})
		began := time.Now()
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := f.handled(); len(h) != 1 || p.Status().Retried != 2 {
			t.Fatalf("handled %v, status %+v", h, p.Status())
		}
		// Back-off: 100ms then 200ms (±20%).
		if waited := time.Since(began); waited < 240*time.Millisecond || waited > 360*time.Millisecond {
			t.Fatalf("retries took %v of back-off, want about 300ms", waited)
		}
	})
}

func TestTransientErrorsDoNotCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.add("a", 1)
		s := fast()
		s.Retry.MaxRetries, s.StopAtEnd = 0, true
		outage := 20
		p := f.project(s, func(projection.Envelope[Added]) error {
			if outage > 0 {
				outage--
				return projection.Transient(errors.New("connection refused"))
			}
			return nil
		})
		if err := p.Run(context.Background()); err != nil {
			t.Fatalf("Run = %v, want the outage waited out", err)
		}
		if h := f.handled(); len(h) != 1 {
			t.Fatalf("handled %v", h)
		}
	})
}

func TestUndecodableEventGoesToThePolicy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.add("a", 1)
		f.addRaw("a", "renamed-long-ago", []byte(`{"x":1}`))
		f.add("a", 3)
		s := fast()
		s.OnFailure, s.StopAtEnd = projection.DeadLetterOnFailure, true
		p := f.project(s, nil)
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if h := f.handled(); strings.Join(h, ",") != "Order|a#1,Order|a#3" {
			t.Fatalf("handled %v", h)
		}
		dead, _ := f.store.DeadLetters(context.Background(), p.Instance())
		if len(dead) != 1 || dead[0].Manifest != "renamed-long-ago" || string(dead[0].Payload) != `{"x":1}` ||
			!strings.Contains(dead[0].Error, codec.ErrUnknownManifest.Error()) || p.Status().Retried != 0 {
			t.Fatalf("dead letters %+v, status %+v: want the raw event, unknown manifest, no retries", dead, p.Status())
		}

		// With the stop policy, Run says which error.
		g := newFixture(t)
		g.addRaw("a", "renamed-long-ago", []byte(`{}`))
		s.OnFailure = projection.StopOnFailure
		err := g.project(s, nil).Run(context.Background())
		if !errors.Is(err, codec.ErrUnknownManifest) {
			t.Fatalf("Run = %v, want ErrUnknownManifest", err)
		}
	})
}

func TestGroupedHandlerGetsBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		for i := range 10 {
			f.add("a", i)
		}
		var sizes []int
		total := 0
		s := fast()
		s.StopAtEnd = true
		p, err := projection.New(f.config(s), projection.AtLeastOnceGrouped(f.store, 4, func(_ context.Context, envs []projection.Envelope[Added]) error {
			sizes = append(sizes, len(envs))
			for _, e := range envs {
				if e.Event.N != total {
					return fmt.Errorf("got %d, want %d", e.Event.N, total)
				}
				total++
			}
			return nil
		}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if total != 10 {
			t.Fatalf("handled %d, want 10", total)
		}
		for _, n := range sizes {
			if n < 1 || n > 4 {
				t.Fatalf("group sizes %v, want 1..4", sizes)
			}
		}
	})
}

func TestReadFailuresAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.add("a", 1)
		f.src.FailNext(errors.New("db gone"), errors.New("db still gone"))
		p := f.project(fast(), nil)
		stop := start(p)
		defer stop()
		synctest.Wait()
		f.add("a", 2)
		time.Sleep(time.Second) // past both back-offs
		synctest.Wait()
		if h := f.handled(); len(h) != 2 || f.src.Queries() < 3 {
			t.Fatalf("handled %v after %d queries", h, f.src.Queries())
		}
	})
}

func TestOffsetOfAnotherKindStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.add("a", 1)
		inst := projection.Instance{Name: "orders", Slices: journal.AllSlices}
		c, err := f.store.Acquire(context.Background(), inst, "setup", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.store.Save(context.Background(), c.Fence, journal.Offset{Kind: "postgres", Tx: 5, Pos: 9}, nil); err != nil {
			t.Fatal(err)
		}
		if err := f.store.Release(context.Background(), c.Fence); err != nil {
			t.Fatal(err)
		}
		err = f.project(fast(), nil).Run(context.Background())
		if !errors.Is(err, journal.ErrOffsetMismatch) {
			t.Fatalf("Run = %v, want ErrOffsetMismatch", err)
		}
		if h := f.handled(); len(h) != 0 {
			t.Fatalf("handled %v", h)
		}
	})
}

func TestPauseResume(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFixture(t)
		p := f.project(fast(), nil)
		if err := p.Pause(ctx); !errors.Is(err, projection.ErrNotRunning) {
			t.Fatalf("Pause before Run = %v, want ErrNotRunning", err)
		}
		stop := start(p)
		synctest.Wait()
		f.add("a", 1)
		synctest.Wait()
		if err := p.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		first := f.src.Events()[0].Offset
		if got := f.stored(p); got != first {
			t.Fatalf("Pause saved %v, want %v", got, first)
		}
		f.add("a", 2)
		time.Sleep(time.Minute)
		synctest.Wait()
		if h := f.handled(); len(h) != 1 || !p.Status().Paused {
			t.Fatalf("handled %v while paused, status %+v", h, p.Status())
		}
		// Paused survives a restart.
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		stop = start(p)
		synctest.Wait()
		if h := f.handled(); len(h) != 1 || !p.Status().Paused {
			t.Fatalf("after restart handled %v, status %+v", h, p.Status())
		}
		if err := p.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h := f.handled(); len(h) != 2 || p.Status().Paused {
			t.Fatalf("after Resume handled %v, status %+v", h, p.Status())
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestResetAndRebuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFixture(t)
		var offs []journal.Offset
		for i := range 4 {
			offs = append(offs, f.add("a", i))
		}
		cleared := 0
		p, err := projection.New(f.config(fast()), projection.AtLeastOnce(f.store, func(_ context.Context, env projection.Envelope[Added]) error {
			f.record(env)
			return nil
		}, func(context.Context) error { cleared++; return nil }))
		if err != nil {
			t.Fatal(err)
		}
		stop := start(p)
		defer stop()
		synctest.Wait()
		if err := p.Reset(ctx, offs[1]); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h := f.handled(); strings.Join(h, ",") != "Order|a#1,Order|a#2,Order|a#3,Order|a#4,Order|a#3,Order|a#4" || cleared != 0 {
			t.Fatalf("after Reset to the 2nd: handled %v, cleared %d", h, cleared)
		}
		if err := p.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if h := f.handled(); len(h) != 10 || cleared != 1 {
			t.Fatalf("after Rebuild: handled %v, cleared %d", h, cleared)
		}
		if err := p.Reset(ctx, journal.Offset{Kind: "postgres", Tx: 1, Pos: 1}); !errors.Is(err, journal.ErrOffsetMismatch) {
			t.Fatalf("Reset to another kind = %v, want ErrOffsetMismatch", err)
		}
	})
}

func TestSecondInstanceRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		first := f.project(fast(), nil)
		stop := start(first)
		defer stop()
		synctest.Wait()
		second := f.project(fast(), nil)
		if err := second.Run(context.Background()); !errors.Is(err, projection.ErrInstanceHeld) {
			t.Fatalf("second Run = %v, want ErrInstanceHeld", err)
		}
		if err := first.Run(context.Background()); !errors.Is(err, projection.ErrAlreadyRunning) {
			t.Fatalf("Run of a running projection = %v, want ErrAlreadyRunning", err)
		}
		// The first stops; the second may take over at once (released).
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		stop2 := start(second)
		synctest.Wait()
		if !second.Status().Running {
			t.Fatalf("second not running after the first stopped: %+v", second.Status())
		}
		_ = stop2()
	})
}

func TestFencedRunnerStops(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		s := fast()
		s.Holder = "a"
		p := f.project(s, nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- p.Run(ctx) }()
		synctest.Wait()
		// Another runner takes the instance (as after a lease expiry).
		if _, err := f.store.Acquire(context.Background(), p.Instance(), "a", time.Minute); err != nil {
			t.Fatal(err)
		}
		time.Sleep(s.LeaseTTL) // the next renewal finds the epoch moved
		synctest.Wait()
		select {
		case err := <-done:
			if !errors.Is(err, projection.ErrFenced) {
				t.Fatalf("Run = %v, want ErrFenced", err)
			}
		default:
			t.Fatal("Run still running after it was fenced")
		}
	})
}

func TestStatusAndMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		reg := prometheus.NewRegistry()
		s := fast()
		s.Registerer = reg
		p := f.project(s, nil)
		stop := start(p)
		defer stop()
		synctest.Wait()
		f.add("a", 1)
		synctest.Wait()
		time.Sleep(3 * time.Second)
		st := p.Status()
		if st.Lag != 3*time.Second || st.Handled != 1 || !st.Running || st.Epoch < 1 {
			t.Fatalf("status %+v, want lag 3s", st)
		}
		labels := map[string]string{"projection": "orders", "instance": "orders/0-1023"}
		if got := metricstest.Value(t, reg, "shoal_projection_lag_seconds", labels); got != 3 {
			t.Fatalf("lag metric %v, want 3", got)
		}
		if got := metricstest.Value(t, reg, "shoal_projection_running", labels); got != 1 {
			t.Fatalf("running metric %v", got)
		}
	})
}

func TestInvalidConfig(t *testing.T) {
	f := newFixture(t)
	for name, mutate := range map[string]func(*projection.Config){
		"no name":      func(c *projection.Config) { c.Name = "" },
		"bad range":    func(c *projection.Config) { c.Slices = journal.SliceRange{Min: 3, Max: 1} },
		"no type":      func(c *projection.Config) { c.EntityType = "" },
		"no source":    func(c *projection.Config) { c.Source = nil },
		"bad retry":    func(c *projection.Config) { c.Settings.Retry.Multiplier = 0.5 },
		"bad policy":   func(c *projection.Config) { c.Settings.OnFailure = 9 },
		"negative ttl": func(c *projection.Config) { c.Settings.LeaseTTL = -1 },
	} {
		c := f.config(fast())
		mutate(&c)
		h := projection.AtLeastOnce(f.store, func(context.Context, projection.Envelope[Added]) error { return nil }, nil)
		if _, err := projection.New(c, h); !errors.Is(err, projection.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestLagEvents(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFixture(t)
		for i := range 5 {
			f.add("a", i)
		}
		p := f.project(fast(), nil)
		if n, err := p.LagEvents(ctx); err != nil || n != 5 {
			t.Fatalf("LagEvents before any run = %d, %v; want 5", n, err)
		}
		stop := start(p)
		defer stop()
		synctest.Wait()
		if err := p.Pause(ctx); err != nil {
			t.Fatal(err)
		}
		f.add("a", 5)
		f.add("a", 6)
		if n, err := p.LagEvents(ctx); err != nil || n != 2 {
			t.Fatalf("LagEvents while paused after 2 more = %d, %v; want 2", n, err)
		}
		type queriesOnly struct{ journal.Queries }
		c := f.config(fast())
		c.Name, c.Source = "other", queriesOnly{f.src}
		q, err := projection.New(c, projection.AtLeastOnce(f.store, func(context.Context, projection.Envelope[Added]) error { return nil }, nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.LagEvents(ctx); !errors.Is(err, errors.ErrUnsupported) {
			t.Fatalf("LagEvents of a source that counts nothing = %v, want ErrUnsupported", err)
		}
	})
}

// TestOneStoredEventSeveralValues: a stored event that decodes to several
// values (an upcaster split it) reaches the handler in one call with one
// offset, and a failure of any retries them all.
func TestOneStoredEventSeveralValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		f.add("a", 1)
		split := f.addRaw("a", "added-twice", []byte(`{"N":2}`))
		f.add("a", 3)
		s := fast()
		s.StopAtEnd = true
		c := f.config(s)
		c.Decode = func(manifest string, payload []byte) ([]any, error) {
			if manifest == "added-twice" {
				return []any{Added{N: 20}, Added{N: 21}}, nil
			}
			return f.reg.DecodeAll(manifest, payload)
		}
		var calls [][]int
		failed := false
		p, err := projection.New(c, projection.AtLeastOnceGrouped(f.store, 1, func(_ context.Context, envs []projection.Envelope[Added]) error {
			var ns []int
			for _, e := range envs {
				ns = append(ns, e.Event.N)
				if e.Event.N == 21 && !failed {
					failed = true
					return errors.New("once")
				}
				if e.Event.N >= 20 && (e.Offset != split || e.SeqNr != 2) {
					t.Errorf("split value %d at %v seq %d, want the stored event's %v seq 2", e.Event.N, e.Offset, e.SeqNr, split)
				}
			}
			calls = append(calls, ns)
			return nil
		}, nil))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Run(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(calls); got != "[[1] [20 21] [3]]" {
			t.Fatalf("handler calls %s, want [[1] [20 21] [3]]", got)
		}
		if st := p.Status(); st.Handled != 4 || st.Retried != 1 {
			t.Fatalf("status %+v", st)
		}
	})
}

// queriesOnly hides the source's EventCounter.
type queriesOnly struct{ journal.Queries }

// The lag in events is counted at each heartbeat and exported as a gauge
// when the source counts events; requests queued in the store apply at
// the heartbeat.
func TestLagEventsGaugeAndStoreRequests(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		f := newFixture(t)
		reg := prometheus.NewRegistry()
		s := fast()
		s.Registerer = reg
		s.LeaseTTL = 3 * time.Second
		p := f.project(s, nil)
		stop := start(p)
		defer stop()
		f.add("a", 1)
		time.Sleep(2 * time.Second)
		labels := map[string]string{"projection": "orders", "instance": "orders/0-1023"}
		if got := metricstest.Value(t, reg, "shoal_projection_lag_events", labels); got != 0 {
			t.Fatalf("lag in events %v when caught up, want 0", got)
		}
		if _, err := f.store.Request(ctx, p.Instance(), projection.OpPause, journal.Offset{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // a heartbeat applies it
		if !p.Status().Paused {
			t.Fatalf("a requested pause did not apply: %+v", p.Status())
		}
		f.add("a", 2)
		f.add("b", 3)
		time.Sleep(2 * time.Second)
		if got := metricstest.Value(t, reg, "shoal_projection_lag_events", labels); got != 2 {
			t.Fatalf("lag in events %v while paused behind two, want 2", got)
		}
		states, err := f.store.Instances(ctx, "orders")
		if err != nil || len(states) != 1 || states[0].Report.LagEvents != 2 || len(states[0].Pending) != 0 || !states[0].Paused {
			t.Fatalf("stored state %+v, %v; want paused, lag 2, nothing pending", states, err)
		}
		if _, err := f.store.Request(ctx, p.Instance(), projection.OpResume, journal.Offset{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(4 * time.Second)
		if got := metricstest.Value(t, reg, "shoal_projection_lag_events", labels); got != 0 || len(f.handled()) != 3 {
			t.Fatalf("after resume: lag in events %v, handled %v", got, f.handled())
		}
	})
}

func TestNoLagEventsGaugeWithoutACounter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFixture(t)
		reg := prometheus.NewRegistry()
		s := fast()
		s.Registerer = reg
		s.LeaseTTL = 3 * time.Second
		c := f.config(s)
		c.Source = queriesOnly{f.src}
		p, err := projection.New(c, projection.AtLeastOnce(f.store, func(context.Context, projection.Envelope[Added]) error { return nil }, nil))
		if err != nil {
			t.Fatal(err)
		}
		stop := start(p)
		defer stop()
		f.add("a", 1)
		time.Sleep(3 * time.Second)
		families, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range families {
			if mf.GetName() == "shoal_projection_lag_events" {
				t.Fatalf("lag in events exported for a source that counts none: %v", mf)
			}
		}
		states, _ := f.store.Instances(context.Background(), "orders")
		if len(states) != 1 || states[0].Report.LagEvents != -1 || states[0].ReportedAt.IsZero() {
			t.Fatalf("stored report %+v, want lag in events -1", states)
		}
	})
}
