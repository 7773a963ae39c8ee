package entity_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/runtime"
)

type cmd interface{ isCmd() }

type add struct{ N int }
type get struct{ ReplyTo entity.ReplyTo[int] }
type boom struct{}
type stop struct{}
type tick struct{ Key string }

func (add) isCmd()  {}
func (get) isCmd()  {}
func (boom) isCmd() {}
func (stop) isCmd() {}
func (tick) isCmd() {}

var counterKey = entity.NewTypeKey[cmd]("counter")

func counter(ctx entity.Context[cmd]) entity.Behavior[cmd] {
	n := 0
	return entity.Receive(func(ctx entity.Context[cmd], c cmd) entity.Behavior[cmd] {
		switch c := c.(type) {
		case add:
			n += c.N
		case get:
			entity.Reply(ctx, c.ReplyTo, n)
		case boom:
			panic("boom")
		case stop:
			return entity.Stopped[cmd]()
		default:
			return entity.Unhandled[cmd]()
		}
		return entity.Same[cmd]()
	})
}

func newSystem(t testing.TB, mutate ...func(*entity.Config)) *entity.System {
	t.Helper()
	cfg := entity.Config{Logger: discardLogger()}
	for _, m := range mutate {
		m(&cfg)
	}
	sys, err := entity.NewSystem(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sys
}

// encodingRouter is a ReplyRouter between processes, as a node's
// transport is: it encodes every reply (EncodeReply) with the codec and
// hands the bytes to send.
type encodingRouter struct {
	codec *codec.Registry
	send  func(to entity.ReplyAddress, manifest string, payload []byte) error
}

func (r encodingRouter) RouteReply(to entity.ReplyAddress, v any) error {
	manifest, payload, err := runtime.EncodeReply(r.codec, v)
	if err != nil {
		return err
	}
	return r.send(to, manifest, payload)
}

func askGet(t *testing.T, ref entity.Ref[cmd]) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := entity.Ask(ctx, ref, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTellAndAskPreserveOrder(t *testing.T) {
	sys := newSystem(t)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "a")
	for i := 1; i <= 1000; i++ {
		if err := c.Tell(add{N: i}); err != nil {
			t.Fatal(err)
		}
	}
	if got := askGet(t, c); got != 500500 {
		t.Fatalf("sum = %d, want 500500", got)
	}
}

func TestPanicStopsOnlyThatEntity(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.Logger = discardLogger() })
	props := &entity.Props[cmd]{Key: counterKey, Create: counter}
	a := entity.Spawn(sys, props, "a")
	b := entity.Spawn(sys, props, "b")
	_ = a.Tell(add{N: 1})
	_ = a.Tell(boom{})
	_ = a.Tell(add{N: 1})
	<-a.Done()
	var pe *entity.PanicError
	if !errors.As(a.Err(), &pe) {
		t.Fatalf("stop reason = %v, want *PanicError", a.Err())
	}
	if err := a.Tell(add{N: 1}); !errors.Is(err, entity.ErrStopped) {
		t.Fatalf("tell after stop = %v, want ErrStopped", err)
	}
	_ = b.Tell(add{N: 2})
	if got := askGet(t, b); got != 2 {
		t.Fatalf("b = %d, want 2", got)
	}
}

func TestAskTimesOutWithTypedError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		silent := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: func(entity.Context[cmd]) entity.Behavior[cmd] {
			return entity.Receive(func(entity.Context[cmd], cmd) entity.Behavior[cmd] { return entity.Same[cmd]() })
		}}, "silent")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := entity.Ask(ctx, silent, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} })
		if !errors.Is(err, entity.ErrAskTimeout) {
			t.Fatalf("err = %v, want ErrAskTimeout", err)
		}
	})
}

func TestForcedSerializationRejectsUnregisteredMessages(t *testing.T) {
	reg := codec.NewRegistry()
	codec.MustRegister[add](reg, "add")
	codec.MustRegister[get](reg, "get")
	sys := newSystem(t, func(c *entity.Config) { c.Codec, c.ForceSerialization = reg, true })
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "a")
	if err := c.Tell(add{N: 3}); err != nil {
		t.Fatal(err)
	}
	if err := c.Tell(boom{}); !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("tell of unregistered = %v, want ErrUnregisteredType", err)
	}
	if got := askGet(t, c); got != 3 {
		t.Fatalf("got %d, want 3 (reply address survives the round trip)", got)
	}
}

func TestIdleEntitiesOwnNoGoroutine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		props := &entity.Props[cmd]{Key: counterKey, Create: counter}
		cells := make([]*entity.Cell[cmd], 100)
		for i := range cells {
			cells[i] = entity.Spawn(sys, props, "e")
			_ = cells[i].Tell(add{N: 1})
		}
		// synctest.Test fails if any goroutine started in the bubble is
		// still running when it returns; idle entities must leave none.
		synctest.Wait()
	})
}

type owner struct {
	mu          sync.Mutex
	passivated  []string
	stopped     map[string]error
	stoppedCall atomic.Int32
}

func (o *owner) Passivate(c *entity.Cell[cmd]) {
	o.mu.Lock()
	o.passivated = append(o.passivated, c.EntityID())
	o.mu.Unlock()
	_ = c.Tell(stop{})
}

func (o *owner) Stopped(c *entity.Cell[cmd], err error) {
	o.mu.Lock()
	o.stopped[c.EntityID()] = err
	o.mu.Unlock()
	o.stoppedCall.Add(1)
}
