package sharding

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/shoal-dev/shoal/entity"
)

// deliverEnv is a shardEnv that records what shardEffects.deliver does
// to the world: the incarnations it starts (ID#N), the tells, the dead
// letters. Handles in stopped refuse mail as stopped (their Stopped
// report still to come), those in refusing with their error.
type deliverEnv struct {
	clock    time.Time
	lost     error // acting's error: the node no longer holds its lease
	n        map[string]int
	stopped  map[string]bool
	refusing map[string]error
	told     []string // "handle msg"
	dead     []string // "entity msg"
}

func newDeliverEnv() *deliverEnv {
	return &deliverEnv{clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), n: map[string]int{},
		stopped: map[string]bool{}, refusing: map[string]error{}}
}

func (e *deliverEnv) spawn(entityID string, _ bool, _ []string) (string, bool) {
	e.n[entityID]++
	return fmt.Sprintf("%s#%d", entityID, e.n[entityID]), true
}

func (e *deliverEnv) now() time.Time { return e.clock }

func (e *deliverEnv) acting(string) error { return e.lost }

func (e *deliverEnv) bufferFull(entityID string) error {
	return fmt.Errorf("%w: %s", ErrBufferFull, entityID)
}

func (e *deliverEnv) unavailable(entityID string, until time.Time, cause error) error {
	return &UnavailableError{EntityID: entityID, RetryAfter: until.Sub(e.clock), Cause: cause}
}

func (e *deliverEnv) tell(h, msg string, _ *trace.SpanContext) error {
	if e.stopped[h] {
		return entity.ErrStopped
	}
	if err := e.refusing[h]; err != nil {
		return err
	}
	e.told = append(e.told, h+" "+msg)
	return nil
}

func (e *deliverEnv) started(string) {}

func (e *deliverEnv) deadLetter(_ error, entityID, msg, _ string) {
	e.dead = append(e.dead, entityID+" "+msg)
}

func (e *deliverEnv) sendStop(*shardEffect[string, string])   {}
func (e *deliverEnv) forceStop(*shardEffect[string, string])  {}
func (e *deliverEnv) armTimer(*shardEffect[string, string])   {}
func (e *deliverEnv) cancelTimer(uint64)                      {}
func (e *deliverEnv) remember(string, bool)                   {}
func (e *deliverEnv) refuseAsks(*shardEffect[string, string]) {}
func (e *deliverEnv) handedOff([]pending[string])             {}

func newDeliverShard(bufferLimit int) (*shardEffects[string, string], *deliverEnv) {
	env := newDeliverEnv()
	core := newShardCore[string, string](shardCoreConfig{
		hasStopMessage: true, stopTimeout: 30 * time.Second, handOffTimeout: time.Minute,
		restartBackoffMin: time.Second, restartBackoffMax: 10 * time.Second, bufferLimit: bufferLimit,
	}, func() float64 { return 0.5 })
	return &shardEffects[string, string]{core: core, env: env}, env
}

// shardEffects.deliver is the one delivery of the shard runner and of the
// simulator: each of its verdicts, and what it hands the environment.
func TestShardEffectsDeliver(t *testing.T) {
	deliver := func(t *testing.T, x *shardEffects[string, string], id, msg string, failFast, accepted bool) error {
		t.Helper()
		return x.deliver(id, msg, false, failFast, accepted, 1, nil)
	}
	wantTold := func(t *testing.T, env *deliverEnv, want ...string) {
		t.Helper()
		if !slices.Equal(env.told, want) {
			t.Fatalf("told %q, want %q", env.told, want)
		}
	}

	t.Run("starts the entity, then tells it", func(t *testing.T) {
		x, env := newDeliverShard(0)
		for _, m := range []string{"m1", "m2"} {
			if err := deliver(t, x, "a", m, false, false); err != nil {
				t.Fatal(err)
			}
		}
		wantTold(t, env, "a#1 m1", "a#1 m2")
	})

	t.Run("start only starts", func(t *testing.T) {
		x, env := newDeliverShard(0)
		if err := x.deliver("a", "", true, false, false, 1, nil); err != nil {
			t.Fatal(err)
		}
		if env.n["a"] != 1 || len(env.told) != 0 {
			t.Fatalf("started %d, told %q; want one start, no tell", env.n["a"], env.told)
		}
	})

	t.Run("without the node lease nothing happens", func(t *testing.T) {
		x, env := newDeliverShard(0)
		env.lost = ErrEntityUnavailable
		if err := deliver(t, x, "a", "m1", false, false); !errors.Is(err, ErrEntityUnavailable) {
			t.Fatalf("deliver: %v, want the environment's error", err)
		}
		if env.n["a"] != 0 || len(x.core.entities) != 0 {
			t.Fatalf("started %d, core knows %d entities; want none", env.n["a"], len(x.core.entities))
		}
	})

	t.Run("a stopped incarnation's mail waits for the next one", func(t *testing.T) {
		x, env := newDeliverShard(1)
		_ = deliver(t, x, "a", "m1", false, false)
		env.stopped["a#1"] = true
		if err := deliver(t, x, "a", "m2", false, false); err != nil {
			t.Fatalf("deliver to a stopped incarnation: %v, want it held", err)
		}
		if err := deliver(t, x, "a", "m3", false, false); !errors.Is(err, ErrBufferFull) {
			t.Fatalf("past the buffer's limit: %v, want ErrBufferFull", err)
		}
		x.core.stopped("a", "a#1", nil, env.clock)
		x.apply()
		wantTold(t, env, "a#1 m1", "a#2 m2")
	})

	t.Run("held while it passivates", func(t *testing.T) {
		x, env := newDeliverShard(1)
		_ = deliver(t, x, "a", "m1", false, false)
		x.core.passivate("a", "a#1")
		x.apply()
		if err := deliver(t, x, "a", "m2", false, false); err != nil {
			t.Fatal(err)
		}
		if err := deliver(t, x, "a", "m3", false, false); !errors.Is(err, ErrBufferFull) {
			t.Fatalf("past the buffer's limit: %v, want ErrBufferFull", err)
		}
		if err := deliver(t, x, "a", "m4", false, true); err != nil {
			t.Fatalf("accepted past the limit: %v, want it held", err)
		}
		x.core.stopped("a", "a#1", nil, env.clock)
		x.apply()
		wantTold(t, env, "a#1 m1", "a#2 m2", "a#2 m4")
	})

	t.Run("refused by the mailbox", func(t *testing.T) {
		x, env := newDeliverShard(0)
		_ = deliver(t, x, "a", "m1", false, false)
		full := errors.New("mailbox full")
		env.refusing["a#1"] = full
		if err := deliver(t, x, "a", "m2", false, false); !errors.Is(err, full) {
			t.Fatalf("deliver: %v, want the mailbox's refusal", err)
		}
		if err := deliver(t, x, "a", "m3", false, true); err != nil {
			t.Fatalf("accepted: %v, want a dead letter instead", err)
		}
		if !slices.Equal(env.dead, []string{"a m3"}) {
			t.Fatalf("dead letters %q, want the accepted message's alone", env.dead)
		}
	})

	t.Run("fail-fast while it backs off", func(t *testing.T) {
		x, env := newDeliverShard(0)
		_ = deliver(t, x, "a", "m1", false, false)
		cause := errors.New("boom")
		x.core.stopped("a", "a#1", cause, env.clock)
		x.apply()
		env.clock = env.clock.Add(100 * time.Millisecond)
		err := deliver(t, x, "a", "m2", true, false)
		var ue *UnavailableError
		if !errors.As(err, &ue) || !errors.Is(err, cause) {
			t.Fatalf("fail-fast deliver: %v, want an UnavailableError of the failure", err)
		}
		until, _ := x.core.backOffOf("a")
		if want := until.Sub(env.clock); ue.RetryAfter != want || want <= 0 {
			t.Fatalf("retry after %v, want %v, what is left of the back-off", ue.RetryAfter, want)
		}
		if err := deliver(t, x, "a", "m3", false, false); err != nil {
			t.Fatalf("not fail-fast: %v, want it held", err)
		}
		wantTold(t, env, "a#1 m1")
	})
}
