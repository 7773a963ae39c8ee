package eventsourcedtest_test

import (
	"fmt"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

// The entity under test: an account that refuses to go below zero.
type (
	AccountCommand interface{ isAccountCommand() }
	Deposit        struct{ Amount int }
	Withdraw       struct {
		Amount  int
		ReplyTo entity.ReplyTo[bool]
	}
	AccountEvent interface{ isAccountEvent() }
	Deposited    struct{ Amount int }
	Withdrawn    struct{ Amount int }
	Account      struct{ Balance int }
)

func (Deposit) isAccountCommand()  {}
func (Withdraw) isAccountCommand() {}
func (Deposited) isAccountEvent()  {}
func (Withdrawn) isAccountEvent()  {}

var AccountKey = entity.NewTypeKey[AccountCommand]("Account")

func NewAccount(ec entity.Context[AccountCommand]) entity.Behavior[AccountCommand] {
	return eventsourced.New(eventsourced.Config[AccountCommand, AccountEvent, Account]{
		PersistenceID:   eventsourced.PersistenceIDOf(AccountKey, ec.EntityID()),
		EnforcedReplies: true,
		OnCommand: func(ctx eventsourced.CommandContext[AccountCommand, AccountEvent, Account], s Account, c AccountCommand) eventsourced.Effect[AccountEvent, Account] {
			switch c := c.(type) {
			case Deposit:
				return ctx.Persist(Deposited{Amount: c.Amount})
			case Withdraw:
				if c.Amount > s.Balance {
					return ctx.Reply(eventsourced.To(c.ReplyTo, false))
				}
				return ctx.Persist(Withdrawn{Amount: c.Amount}).ThenReply(eventsourced.To(c.ReplyTo, true))
			}
			return ctx.Unhandled()
		},
		OnEvent: func(_ eventsourced.Context[AccountCommand], s Account, e AccountEvent) Account {
			switch e := e.(type) {
			case Deposited:
				s.Balance += e.Amount
			case Withdrawn:
				s.Balance -= e.Amount
			}
			return s
		},
	})
}

func accountCodec() *codec.Registry {
	r := codec.NewRegistry()
	codec.MustRegister[Deposit](r, "account.Deposit")
	codec.MustRegister[Withdraw](r, "account.Withdraw")
	codec.MustRegister[Deposited](r, "account.Deposited")
	codec.MustRegister[Withdrawn](r, "account.Withdrawn")
	codec.MustRegister[Account](r, "account.Account")
	return r
}

// printingT stands in for the *testing.T a real test passes to the kit.
type printingT struct{ cleanups []func() }

func (*printingT) Helper()                           {}
func (*printingT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (*printingT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
func (*printingT) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (t *printingT) Cleanup(f func())                { t.cleanups = append(t.cleanups, f) }
func (t *printingT) done() {
	for _, f := range t.cleanups {
		f()
	}
}

// In a test, with t the test's *testing.T: run commands, look at the
// events, state and reply each produced, and restart to check recovery.
func Example() {
	t := &printingT{}
	defer t.done()
	kit := eventsourcedtest.New[AccountCommand, AccountEvent, Account](t, AccountKey, NewAccount,
		eventsourcedtest.Options{Codec: accountCodec()})

	res := kit.RunCommand(Deposit{Amount: 10})
	fmt.Printf("deposit: events %v, state %+v\n", res.Events, res.State)

	withdraw := func(amount int) func(entity.ReplyTo[bool]) AccountCommand {
		return func(r entity.ReplyTo[bool]) AccountCommand { return Withdraw{Amount: amount, ReplyTo: r} }
	}
	ok := eventsourcedtest.RunCommandWithReply(kit, withdraw(4))
	fmt.Printf("withdraw 4: reply %v, events %v, state %+v\n", ok.Reply, ok.Events, ok.State)
	refused := eventsourcedtest.RunCommandWithReply(kit, withdraw(100))
	fmt.Printf("withdraw 100: reply %v, events %v\n", refused.Reply, refused.Events)

	kit.Restart()
	fmt.Printf("recovered: %+v\n", kit.State())
	// Output:
	// deposit: events [{10}], state {Balance:10}
	// withdraw 4: reply true, events [{4}], state {Balance:6}
	// withdraw 100: reply false, events []
	// recovered: {Balance:6}
}

// Passivation as under sharding: the kit sends the entity its stop message
// (Options.StopMessage), which a busy worker (passivate_test.go) stashes
// until its job's result is stored. History has every write and its cause.
func ExampleOptions_stopMessage() {
	t := &printingT{}
	defer t.done()
	release := make(chan struct{})
	kit := eventsourcedtest.New[workerCmd, workerEv, worker](t, workerKey, newWorker(release),
		eventsourcedtest.Options{Codec: workerRegistry(), StopMessage: stopWork{}})

	kit.RunCommand(work{})
	res := kit.RunCommand(goIdle{}) // the entity passivates while busy
	fmt.Println("passivated:", kit.Passivated(), "stopped:", res.Stopped)

	close(release) // the job ends; its result is stored, then the stop honoured
	<-kit.Cell().Done()
	for _, w := range kit.History() {
		fmt.Printf("%T wrote %T\n", w.Cause, w.Events[0])
	}
	// Output:
	// passivated: true stopped: false
	// eventsourcedtest_test.work wrote eventsourcedtest_test.started
	// eventsourcedtest_test.finished wrote eventsourcedtest_test.done
}
