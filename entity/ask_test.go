package entity_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/internal/runtime"
)

type acct interface{ isAcct() }

type balance struct {
	Owner string
	Cents int64
	Tags  []string
}

type getBalance struct{ ReplyTo entity.ReplyTo[balance] }

// holdReply keeps the address to answer later.
type holdReply struct{ ReplyTo entity.ReplyTo[balance] }

// replyHeld answers the held address, Times times.
type replyHeld struct{ Times int }

// deposit carries a slice, so a missed copy would be visible.
type deposit struct{ Cents []int64 }

// unserializable reply type: json cannot encode a channel.
type chanReply struct{ C chan int }

type getChan struct{ ReplyTo entity.ReplyTo[chanReply] }

func (getBalance) isAcct() {}
func (holdReply) isAcct()  {}
func (replyHeld) isAcct()  {}
func (deposit) isAcct()    {}
func (getChan) isAcct()    {}

var acctKey = entity.NewTypeKey[acct]("account")

// account keeps held reply addresses as JSON, as an event-sourced entity
// keeping them in persisted state would.
func account(ctx entity.Context[acct]) entity.Behavior[acct] {
	b := balance{Owner: ctx.EntityID()}
	var held []byte
	return entity.Receive(func(ctx entity.Context[acct], m acct) entity.Behavior[acct] {
		switch m := m.(type) {
		case deposit:
			for _, c := range m.Cents {
				b.Cents += c
			}
			b.Tags = append(b.Tags, "dep")
		case getBalance:
			entity.Reply(ctx, m.ReplyTo, b)
		case holdReply:
			var err error
			if held, err = json.Marshal(m.ReplyTo); err != nil {
				panic(err)
			}
		case replyHeld:
			var to entity.ReplyTo[balance]
			if err := json.Unmarshal(held, &to); err != nil {
				panic(err)
			}
			for range m.Times {
				entity.Reply(ctx, to, b)
			}
		case getChan:
			entity.Reply(ctx, m.ReplyTo, chanReply{C: make(chan int)})
		default:
			return entity.Unhandled[acct]()
		}
		return entity.Same[acct]()
	})
}

func spawnAccount(sys *entity.System, id string) *entity.Cell[acct] {
	return entity.Spawn(sys, &entity.Props[acct]{Key: acctKey, Create: account}, id)
}

func TestAskTypedReply(t *testing.T) {
	sys := newSystem(t)
	a := spawnAccount(sys, "alice")
	mustTell[acct](t, a, deposit{Cents: []int64{100, 250}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct {
		if r.IsZero() {
			t.Error("Ask built a zero ReplyTo")
		}
		return getBalance{ReplyTo: r}
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.Owner != "alice" || got.Cents != 350 {
		t.Fatalf("reply %+v", got)
	}
}

func TestAskDeadlineIsTypedTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		a := spawnAccount(sys, "a")
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct { return holdReply{ReplyTo: r} })
		if !errors.Is(err, entity.ErrAskTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v, want ErrAskTimeout wrapping DeadlineExceeded", err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("Ask returned after %v, want exactly its 3s deadline", d)
		}
	})
}

func TestAskCancelledIsNotTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		a := spawnAccount(sys, "a")
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			time.Sleep(time.Second)
			cancel()
		}()
		_, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct { return holdReply{ReplyTo: r} })
		if !errors.Is(err, context.Canceled) || errors.Is(err, entity.ErrAskTimeout) {
			t.Fatalf("err = %v, want Canceled and not ErrAskTimeout", err)
		}
	})
}

func TestAskStoppedEntity(t *testing.T) {
	sys := newSystem(t)
	a := spawnAccount(sys, "a")
	a.StopNow()
	waitDone(t, a)
	_, err := entity.Ask(context.Background(), a, func(r entity.ReplyTo[balance]) acct { return getBalance{ReplyTo: r} })
	if !errors.Is(err, entity.ErrStopped) {
		t.Fatalf("err = %v, want ErrStopped", err)
	}
}

// A reply that comes after its Ask gave up reaches nobody: a dead letter.
func TestReplyAfterAskReturnedIsDeadLetter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		a := spawnAccount(sys, "a")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct { return holdReply{ReplyTo: r} }); !errors.Is(err, entity.ErrAskTimeout) {
			t.Fatalf("err = %v", err)
		}
		before := sys.DeadLetters()
		mustTell[acct](t, a, replyHeld{Times: 1})
		synctest.Wait()
		if got := sys.DeadLetters() - before; got != 1 {
			t.Fatalf("%d dead letters for a late reply, want 1", got)
		}
	})
}

// A held ReplyTo survives a JSON round trip (it may sit in persisted state)
// and still reaches its Ask; only the first reply counts, a second one is a
// dead letter.
func TestHeldReplyToAfterJSONRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t)
		a := spawnAccount(sys, "bob")
		mustTell[acct](t, a, deposit{Cents: []int64{5}})
		type result struct {
			b   balance
			err error
		}
		res := make(chan result, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct { return holdReply{ReplyTo: r} })
			res <- result{b, err}
		}()
		synctest.Wait() // the address is held; the Ask waits
		if len(res) != 0 {
			t.Fatal("Ask returned before any reply")
		}
		mustTell[acct](t, a, replyHeld{Times: 2})
		r := <-res
		if r.err != nil {
			t.Fatal(r.err)
		}
		if r.b.Owner != "bob" || r.b.Cents != 5 {
			t.Fatalf("reply %+v", r.b)
		}
		synctest.Wait()
		if sys.DeadLetters() != 1 {
			t.Fatalf("dead letters %d, want 1 (the second reply)", sys.DeadLetters())
		}
	})
}

func TestReplyToJSON(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "n1", 7 })
	a := spawnAccount(sys, "a")
	var captured entity.ReplyTo[balance]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct {
		captured = r
		return getBalance{ReplyTo: r}
	})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(captured)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"node":"n1"`) || !strings.Contains(string(data), `"incarnation":7`) {
		t.Fatalf("encoded %s does not carry the node and its incarnation", data)
	}
	if want := (entity.ReplyAddress{Node: "n1", Incarnation: 7, AskID: captured.Address().AskID}); captured.Address() != want || want.AskID == 0 {
		t.Fatalf("address %+v, want %+v", captured.Address(), want)
	}
	var back entity.ReplyTo[balance]
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back != captured || back.String() != captured.String() || back.IsZero() {
		t.Fatalf("round trip %v -> %s -> %v", captured, data, back)
	}
	// Embedded in a command.
	cmdData, err := json.Marshal(getBalance{ReplyTo: captured})
	if err != nil {
		t.Fatal(err)
	}
	var cmdBack getBalance
	if err := json.Unmarshal(cmdData, &cmdBack); err != nil || cmdBack.ReplyTo != captured {
		t.Fatalf("command round trip: %v %v", cmdBack, err)
	}
	var zero entity.ReplyTo[int]
	if !zero.IsZero() {
		t.Fatal("zero ReplyTo not IsZero")
	}
	if err := json.Unmarshal([]byte(`"not an object"`), &back); err == nil {
		t.Fatal("bad reply address decoded")
	}
}

func TestReplyToUnknownNodeIsDeadLetter(t *testing.T) {
	sys := newSystem(t, func(c *entity.Config) { c.NodeID = "here" })
	var to entity.ReplyTo[int]
	if err := json.Unmarshal([]byte(`{"node":"elsewhere","id":7}`), &to); err != nil {
		t.Fatal(err)
	}
	err := entity.Reply(sys, to, 1) // the System is a Replier too
	if !errors.Is(err, entity.ErrNoRemoteReplies) {
		t.Fatalf("Reply: %v, want ErrNoRemoteReplies", err)
	}
	if sys.DeadLetters() != 1 {
		t.Fatalf("dead letters %d, want 1", sys.DeadLetters())
	}
}

// A reply for another node goes to the ReplyRouter, which encodes it; its
// refusal is Reply's error, wrapped, and a dead letter.
func TestReplyToOtherNodeUsesTheReplyRouter(t *testing.T) {
	type sent struct {
		to       entity.ReplyAddress
		manifest string
		payload  string
	}
	var got []sent
	refuse := errors.New("link queue full")
	var answer error
	reg := codec.NewRegistry()
	codec.MustRegister[balance](reg, "balance")
	sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Codec = "here", reg })
	runtime.SetReplyRouter(sys, encodingRouter{reg, func(to entity.ReplyAddress, manifest string, payload []byte) error {
		got = append(got, sent{to, manifest, string(payload)})
		return answer
	}})
	var to entity.ReplyTo[balance]
	if err := json.Unmarshal([]byte(`{"node":"there","incarnation":3,"id":9}`), &to); err != nil {
		t.Fatal(err)
	}
	if err := entity.Reply(sys, to, balance{Owner: "o", Cents: 2}); err != nil {
		t.Fatal(err)
	}
	var plain entity.ReplyTo[int]
	if err := json.Unmarshal([]byte(`{"node":"there","incarnation":3,"id":10}`), &plain); err != nil {
		t.Fatal(err)
	}
	answer = refuse
	if err := entity.Reply(sys, plain, 5); !errors.Is(err, refuse) {
		t.Fatalf("Reply through a refusing router: %v", err)
	}
	want := []sent{
		{entity.ReplyAddress{Node: "there", Incarnation: 3, AskID: 9}, "balance", `{"Owner":"o","Cents":2,"Tags":null}`},
		{entity.ReplyAddress{Node: "there", Incarnation: 3, AskID: 10}, runtime.JSONReplyManifest, `5`},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("router sent %+v, want %+v", got, want)
	}
	if sys.DeadLetters() != 1 {
		t.Fatalf("dead letters %d, want 1 (the refused reply)", sys.DeadLetters())
	}
}

// A reply addressed to an earlier incarnation of this node (a ReplyTo kept
// in persisted state across a restart) is refused, even when an ask of
// this incarnation has the same id.
func TestReplyToOtherIncarnationOfThisNodeIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "here", 2 })
		a := spawnAccount(sys, "a")
		res := make(chan error, 1)
		var current entity.ReplyAddress
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct {
				current = r.Address()
				return holdReply{ReplyTo: r}
			})
			res <- err
		}()
		synctest.Wait()
		var old entity.ReplyTo[balance]
		data, _ := json.Marshal(entity.ReplyAddress{Node: "here", Incarnation: 1, AskID: current.AskID})
		if err := json.Unmarshal(data, &old); err != nil {
			t.Fatal(err)
		}
		if err := entity.Reply(sys, old, balance{Owner: "stale"}); !errors.Is(err, entity.ErrStaleIncarnation) {
			t.Fatalf("Reply: %v, want ErrStaleIncarnation", err)
		}
		if err := runtime.DeliverLocalReply(sys, old.Address(), balance{}); !errors.Is(err, entity.ErrStaleIncarnation) {
			t.Fatalf("DeliverLocalReply: %v, want ErrStaleIncarnation", err)
		}
		other := entity.ReplyAddress{Node: "elsewhere", Incarnation: 2, AskID: current.AskID}
		if err := runtime.DeliverReply(context.Background(), sys, other, runtime.JSONReplyManifest, []byte(`{}`)); !errors.Is(err, runtime.ErrNotThisNode) {
			t.Fatalf("DeliverReply: %v, want ErrNotThisNode", err)
		}
		synctest.Wait()
		if len(res) != 0 || sys.Stats().AsksWaiting != 1 {
			t.Fatal("the ask of this incarnation took a reply meant for another")
		}
		if sys.DeadLetters() != 3 {
			t.Fatalf("dead letters %d, want 3", sys.DeadLetters())
		}
		mustTell[acct](t, a, replyHeld{Times: 1})
		if err := <-res; err != nil {
			t.Fatalf("the ask's own reply: %v", err)
		}
	})
}

// The Reply doc says a reply to a zero ReplyTo is a dead letter.
func TestReplyToZeroAddressIsDeadLetter(t *testing.T) {
	sys := newSystem(t)
	if err := entity.Reply(sys, entity.ReplyTo[int]{}, 1); !errors.Is(err, entity.ErrNoReplyAddress) {
		t.Fatalf("Reply: %v, want ErrNoReplyAddress", err)
	}
	if sys.DeadLetters() != 1 {
		t.Fatalf("dead letters %d, want 1", sys.DeadLetters())
	}
}

func forcedSystem(t *testing.T) *entity.System {
	reg := codec.NewRegistry()
	codec.MustRegister[getBalance](reg, "getBalance")
	codec.MustRegister[holdReply](reg, "holdReply")
	codec.MustRegister[replyHeld](reg, "replyHeld")
	codec.MustRegister[deposit](reg, "deposit")
	codec.MustRegister[getChan](reg, "getChan")
	return newSystem(t, func(c *entity.Config) {
		c.Codec, c.ForceSerialization = reg, true
		c.Logger = discardLogger()
	})
}

// Under forced serialization the entity gets a copy: mutating the sent value
// afterwards does not reach it, and replies (of an unregistered type) still
// reach the asker.
func TestForceSerializationCopiesMessagesAndRoutesReplies(t *testing.T) {
	sys := forcedSystem(t)
	if !sys.ForcesSerialization() {
		t.Fatal("ForcesSerialization false")
	}
	a := spawnAccount(sys, "a")
	gate := make(chan struct{})
	runtime.Post(a, func() { <-gate }) // hold the entity until the sender has mutated its value
	cents := []int64{10, 20}
	mustTell[acct](t, a, deposit{Cents: cents})
	cents[0] = 1_000_000
	close(gate)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := entity.Ask(ctx, a, func(r entity.ReplyTo[balance]) acct { return getBalance{ReplyTo: r} })
	if err != nil {
		t.Fatal(err)
	}
	if b.Cents != 30 || len(b.Tags) != 1 {
		t.Fatalf("balance %+v: entity saw the sender's later mutation or lost data", b)
	}
}

func TestForceSerializationRejectsUnregistered(t *testing.T) {
	sys := forcedSystem(t)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter}, "c")
	err := c.Tell(add{N: 1})
	if !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Tell unregistered = %v, want ErrUnregisteredType", err)
	}
	_, err = entity.Ask(context.Background(), c, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} })
	if !errors.Is(err, codec.ErrUnregisteredType) {
		t.Fatalf("Ask with unregistered command = %v, want ErrUnregisteredType", err)
	}
	if sys.DeadLetters() != 0 {
		t.Fatalf("a rejected send counted %d dead letters", sys.DeadLetters())
	}
}

// A LocalOnly entity, such as a runtime control entity, is exempt: its
// messages never cross the network, so they need no codec.
func TestForceSerializationSkipsLocalOnlyEntities(t *testing.T) {
	sys := forcedSystem(t)
	c := entity.Spawn(sys, &entity.Props[cmd]{Key: counterKey, Create: counter, LocalOnly: true}, "c")
	if err := c.Tell(add{N: 2}); err != nil {
		t.Fatalf("Tell to a LocalOnly entity: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := entity.Ask(ctx, c, func(r entity.ReplyTo[int]) cmd { return get{ReplyTo: r} })
	if err != nil || n != 2 {
		t.Fatalf("Ask = %d, %v; want 2", n, err)
	}
}

func TestForceSerializationUnserializableReply(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := forcedSystem(t)
		a := spawnAccount(sys, "a")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		start := time.Now()
		_, err := entity.Ask(ctx, a, func(r entity.ReplyTo[chanReply]) acct { return getChan{ReplyTo: r} })
		if !errors.Is(err, entity.ErrNotSerializable) || errors.Is(err, entity.ErrAskTimeout) {
			t.Fatalf("err = %v, want ErrNotSerializable, not a timeout", err)
		}
		if waited := time.Since(start); waited != 0 {
			t.Fatalf("Ask waited %v for a reply that could not serialize", waited)
		}
		if sys.DeadLetters() != 1 {
			t.Fatalf("dead letters %d, want 1", sys.DeadLetters())
		}
	})
}
