package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
	"github.com/shoal-dev/shoal/sharding/reminders"
	"github.com/shoal-dev/shoal/timers/reminder"
	remindermemory "github.com/shoal-dev/shoal/timers/reminder/memory"
)

// remindingJournal is a memory journal that writes effects' reminders in
// their events' transaction, into the memory store it returns (as the node
// wires them).
func remindingJournal() (*memory.Journal, *remindermemory.Store) {
	store := remindermemory.New()
	return memory.New(memory.WithSideStore(store)), store
}

// fireReminders fires the reminders of sh's entities until the test ends.
func fireReminders(t *testing.T, sh *sharding.Sharding, store reminder.Store) *reminders.Service {
	t.Helper()
	f, err := reminders.StartAll(sh, reminders.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Stop)
	return f
}

// fakeIssuer answers in-process, so entity tests run inside a synctest
// bubble: by default "00000" at once; Code and Err change the answer, and
// an open gate (Hold) holds every call until Release or until the entity
// stops.
type fakeIssuer struct {
	mu           sync.Mutex
	authCode     string
	revCode      string
	authErr      error
	revErr       error
	gate         chan struct{}
	auths, revrs []IssuerRequest
}

func (f *fakeIssuer) Authorize(ctx context.Context, req IssuerRequest) (IssuerResponse, error) {
	f.mu.Lock()
	f.auths = append(f.auths, req)
	code, err, gate := f.authCode, f.authErr, f.gate
	f.mu.Unlock()
	return f.answer(ctx, gate, req, code, err)
}

func (f *fakeIssuer) Reverse(ctx context.Context, req IssuerRequest) (IssuerResponse, error) {
	f.mu.Lock()
	f.revrs = append(f.revrs, req)
	code, err, gate := f.revCode, f.revErr, f.gate
	f.mu.Unlock()
	return f.answer(ctx, gate, req, code, err)
}

func (f *fakeIssuer) answer(ctx context.Context, gate chan struct{}, req IssuerRequest, code string, err error) (IssuerResponse, error) {
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return IssuerResponse{}, ctx.Err()
		}
	}
	if err != nil {
		return IssuerResponse{}, err
	}
	if code == "" {
		code = ErrCodeOK
	}
	return IssuerResponse{IntranID: "I" + req.TransactionID, AuthID: "1", ErrCode: code}, nil
}

// Hold makes calls wait until Release.
func (f *fakeIssuer) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gate = make(chan struct{})
}

// Release lets held and later calls through.
func (f *fakeIssuer) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.gate)
	f.gate = nil
}

// releaseHeld ends a test: calls to the issuer outlive their entity
// (issuing.go), so held ones must be let through for the bubble to end.
func (f *fakeIssuer) releaseHeld() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gate != nil {
		close(f.gate)
		f.gate = nil
	}
}

func (f *fakeIssuer) calls() (auths, reversals int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.auths), len(f.revrs)
}

var (
	testKey = OrderKey{Tenant: TenantExample, ClientID: 7, WalletShopID: "shop-1", OrderID: "order1"}
	// aliceCredential is where alice's credential at shop-1 is.
	aliceCredential = CredentialKey{Tenant: TenantExample, CustomerID: "alice", ClientID: 7, WalletShopID: "shop-1"}
	// alice pays; bob is another customer of the same client.
	aliceSettle = SettleRequest{ClientID: 7, CustomerID: "alice", WalletShopID: "shop-1", OrderID: "order1", Amount: 1000}
	aliceCancel = CancelRequest{ClientID: 7, CustomerID: "alice", WalletShopID: "shop-1", OrderID: "order1"}
	bobCancel   = CancelRequest{ClientID: 7, CustomerID: "bob", WalletShopID: "shop-1", OrderID: "order1"}
)

func testTables() *MemoryTables {
	t := NewMemoryTables()
	for _, customer := range []string{"alice", "bob"} {
		t.Put(CredentialKey{Tenant: TenantExample, CustomerID: customer, ClientID: 7, WalletShopID: "shop-1"},
			PayCredential{MemberStoreID: "store1", HousePAN: "4000" + customer, TerminalID: "T-" + customer})
	}
	return t
}

func testRegistry() *codec.Registry {
	r := codec.NewRegistry()
	Register(r)
	return r
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture runs one payment entity in the testkit, inside a synctest bubble.
// The testkit's entity has no owner, so passivating stops it; the next
// request starts a new incarnation, as a shard would.
type fixture struct {
	t      *testing.T
	kit    *eventsourcedtest.Kit[Command, Event, State]
	issuer *fakeIssuer
	tables *MemoryTables
	reg    *codec.Registry
}

func newFixture(t *testing.T, settings Settings) *fixture {
	f := newFixtureWith(t, settings, &fakeIssuer{})
	t.Cleanup(f.issuer.releaseHeld) // end the issuer calls still held, so the bubble can end
	return f
}

// newFixtureWith is newFixture with another issuer; f.issuer is set only
// when it is a fakeIssuer.
func newFixtureWith(t *testing.T, settings Settings, issuer Issuer) *fixture {
	f := &fixture{t: t, tables: testTables(), reg: testRegistry()}
	f.issuer, _ = issuer.(*fakeIssuer)
	p := &Payments{Settings: settings, Issuer: issuer, Credentials: f.tables, Sequences: f.tables}
	f.kit = eventsourcedtest.New[Command, Event, State](t, TypeKey, p.Create,
		eventsourcedtest.Options{Codec: f.reg, EntityID: testKey.EntityID()})
	t.Cleanup(f.kit.Stop) // the kit's own stop is expected; an earlier one is judged
	return f
}

// handlerTransport serves HTTP requests in-process with h: no sockets, so
// an IssuerClient and the Simulator can run in a synctest bubble, on its
// fake clock. A request whose context ends fails as it would on the wire;
// a handler that aborts (http.ErrAbortHandler) is a dropped connection.
type handlerTransport struct{ h http.Handler }

func (t handlerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rec := httptest.NewRecorder()
	done := make(chan error, 1)
	go func() {
		defer func() {
			if v := recover(); v != nil {
				done <- fmt.Errorf("connection dropped: %v", v)
			}
		}()
		t.h.ServeHTTP(rec, req)
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
		return rec.Result(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// simulatedIssuer is an IssuerClient with the original's timeouts
// (DefaultIssuerClientConfig) calling sim in-process. cfg may change them.
func simulatedIssuer(sim *Simulator, cfg func(*IssuerClientConfig)) *IssuerClient {
	c := DefaultIssuerClientConfig()
	c.URL = "http://issuer.test/payment"
	if cfg != nil {
		cfg(&c)
	}
	return NewIssuerClient(c, &http.Client{Transport: handlerTransport{sim}})
}

// ref is the running incarnation, started anew if the last one passivated.
func (f *fixture) ref() entity.Ref[Command] {
	if stopped, err := f.kit.Stopped(); stopped {
		if err != nil {
			f.t.Fatalf("entity failed: %v", err)
		}
		f.kit.Restart()
	}
	return f.kit.Ref()
}

// ask sends the request and returns where its answer will arrive.
func ask[R any](f *fixture, build func(entity.ReplyTo[R]) Command) <-chan R {
	ch := make(chan R, 1)
	ref := f.ref()
	go func() {
		ctx, cancel := context.WithTimeout(f.t.Context(), time.Hour)
		defer cancel()
		if r, err := entity.Ask(ctx, ref, build); err == nil {
			ch <- r
		}
	}()
	synctest.Wait() // sent, and handled as far as it goes: requests keep their order
	return ch
}

func (f *fixture) settle(req SettleRequest) <-chan Response {
	return ask(f, func(r entity.ReplyTo[Response]) Command { return Settle{SettleRequest: req, TraceID: "t", ReplyTo: r} })
}

func (f *fixture) cancel(req CancelRequest) <-chan Response {
	return ask(f, func(r entity.ReplyTo[Response]) Command { return Cancel{CancelRequest: req, TraceID: "t", ReplyTo: r} })
}

// answer waits until everything in the bubble has settled and returns the
// answer, failing if there is none.
func (f *fixture) answer(ch <-chan Response) Response {
	f.t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		return r
	default:
		f.t.Fatal("no answer")
		return Response{}
	}
}

// noAnswer checks that ch has no answer once everything has settled.
func (f *fixture) noAnswer(ch <-chan Response) {
	f.t.Helper()
	synctest.Wait()
	select {
	case r := <-ch:
		f.t.Fatalf("unexpected answer %v", r)
	default:
	}
}

// storedEvents are the events stored so far.
func (f *fixture) storedEvents() []Event {
	f.t.Helper()
	var out []Event
	for _, e := range f.kit.Journal().Written() {
		ev, err := codec.DecodeAs[Event](f.reg, e.Manifest, e.Payload)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, ev)
	}
	return out
}

// events are the types of the events stored so far.
func (f *fixture) events() []string {
	return manifests(f.kit.Journal().Written())
}

func manifests(evs []journal.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Manifest
	}
	return out
}

// state is the entity's state: the running incarnation's, or a fresh one's
// recovered from the journal if the last one passivated.
func (f *fixture) state() State {
	f.ref()
	return f.kit.State()
}

// passivated reports whether the incarnation has stopped (the testkit's
// entity has no owner, so Passivate stops it).
func (f *fixture) passivated() bool {
	synctest.Wait()
	stopped, err := f.kit.Stopped()
	if err != nil {
		f.t.Fatalf("entity failed: %v", err)
	}
	return stopped
}

// timerActive reports whether the processing timeout t is scheduled.
func (f *fixture) timerActive(t ProcessingTimeout) bool {
	active := false
	f.kit.Inspect(func(ctx entity.Context[Command]) { active = ctx.Timers().IsActive(t.timerKey()) })
	return active
}

func wantEvents(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != "payment."+want[i] {
			t.Fatalf("events %v, want %v", got, want)
		}
	}
}

func wantOK(t *testing.T, r Response) {
	t.Helper()
	if !r.OK() {
		t.Fatalf("answer %v, want success", r)
	}
}

func wantFailure(t *testing.T, r Response, code Code) {
	t.Helper()
	if r.OK() || r.Failure.Code != code {
		t.Fatalf("answer %v, want %s", r, code)
	}
}

// localNode runs payment entities on single-node sharding, whose
// passivation and hand-off send StopActor, inside a synctest bubble.
type localNode struct {
	t         *testing.T
	issuer    *fakeIssuer
	journal   *memory.Journal
	reminders *remindermemory.Store
	firing    *reminders.Service
	sharding  *sharding.Sharding
	entities  *sharding.Region[Command]
}

func newLocalNode(t *testing.T, settings Settings) *localNode {
	j, store := remindingJournal()
	return newLocalNodeOn(t, settings, j, store)
}

// newLocalNodeOn runs the node on stores another node may share: a node
// started after a killed one is the payments' next home.
func newLocalNodeOn(t *testing.T, settings Settings, j *memory.Journal, store *remindermemory.Store) *localNode {
	reg := testRegistry()
	sys, err := entity.NewSystem(entity.Config{Codec: reg, Journal: j, Reminders: store, ForceSerialization: true, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	tables := testTables()
	n := &localNode{t: t, issuer: &fakeIssuer{}, journal: j, reminders: store}
	if n.sharding, err = sharding.New(sys, sharding.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.sharding.Terminate)
	n.firing = fireReminders(t, n.sharding, store)
	t.Cleanup(n.issuer.releaseHeld)
	p := &Payments{Settings: settings, Issuer: n.issuer, Credentials: tables, Sequences: tables}
	if n.entities, err = InitPayments(n.sharding, p, 1); err != nil {
		t.Fatal(err)
	}
	return n
}

// kill stops the node as a crash would: its entities and its firing stop
// at once; the stores keep what was written.
func (n *localNode) kill() {
	n.firing.Stop()
	n.sharding.Terminate()
}

// resident is how many payment entities run.
func (n *localNode) resident() int { return residentEntities(n.entities) }

func (n *localNode) ref() sharding.EntityRef[Command] {
	return n.entities.EntityRefFor(testKey.EntityID())
}

func (n *localNode) ask(build func(entity.ReplyTo[Response]) Command) <-chan Response {
	ch := make(chan Response, 1)
	go func() {
		ctx, cancel := context.WithTimeout(n.t.Context(), time.Hour)
		defer cancel()
		if r, err := entity.Ask(ctx, n.ref(), build); err == nil {
			ch <- r
		}
	}()
	synctest.Wait()
	return ch
}

func (n *localNode) settle(req SettleRequest) <-chan Response {
	return n.ask(func(r entity.ReplyTo[Response]) Command { return Settle{SettleRequest: req, ReplyTo: r} })
}

func (n *localNode) cancel(req CancelRequest) <-chan Response {
	return n.ask(func(r entity.ReplyTo[Response]) Command { return Cancel{CancelRequest: req, ReplyTo: r} })
}

func (n *localNode) events() []string {
	var out []journal.Event
	err := n.journal.Replay(context.Background(), "ec-house-money|"+testKey.EntityID(), 1, 1<<62, func(e journal.Event) error {
		out = append(out, e)
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return manifests(out)
}
