package entity_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/internal/runtime"
	"github.com/shoal-dev/shoal/journal"
)

// The tests in this file cover the failure a node sends, on the reply
// route, to an ask of another node that it knows will never be answered:
// its wire form, and how the asking node maps it back to sentinels.

// remoteReplyTo is a reply address of an ask on node b.
func remoteReplyTo(t *testing.T, askID uint64) entity.ReplyTo[quote] {
	t.Helper()
	var to entity.ReplyTo[quote]
	if err := json.Unmarshal(fmt.Appendf(nil, `{"node":"b","incarnation":1,"id":%d}`, askID), &to); err != nil {
		t.Fatal(err)
	}
	return to
}

type sentReply struct {
	to       entity.ReplyAddress
	manifest string
	payload  string
}

// The failure's wire form: AskFailureManifest and the payload below, byte
// for byte. A change here breaks asks between nodes of two versions.
func TestAskFailureWireForm(t *testing.T) {
	var sent recorder[sentReply]
	sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "a", 1 })
	runtime.SetReplyRouter(sys, encodingRouter{nil, func(to entity.ReplyAddress, manifest string, payload []byte) error {
		sent.add(sentReply{to, manifest, string(payload)})
		return nil
	}})
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"unhandled", fmt.Errorf("entity: ask: q unhandled: %w", entity.ErrUnhandled),
			`{"code":1,"msg":"entity: ask: q unhandled: entity: message unhandled"}`},
		{"stopped", fmt.Errorf("left: %w", entity.ErrStopped),
			`{"code":2,"msg":"left: entity: stopped"}`},
		{"crashed", fmt.Errorf("crashed: %w: %w", entity.ErrStopped, &entity.PanicError{Value: "boom"}),
			`{"code":3,"msg":"crashed: entity: stopped: entity: handler panicked: boom"}`},
		{"mailbox full", entity.ErrMailboxFull, `{"code":4,"msg":"entity: mailbox full"}`},
		{"unavailable after a failed write", fmt.Errorf("%w: %w", runtime.ErrUnavailable, runtime.ErrPersistFailed),
			`{"code":5,"also":[6],"msg":"sharding: entity unavailable: eventsourced: persist failed"}`},
		{"stopped by a failed write", fmt.Errorf("%w: %w", entity.ErrStopped, runtime.ErrPersistFailed),
			`{"code":6,"also":[2],"msg":"entity: stopped: eventsourced: persist failed"}`},
		{"rejected", runtime.ErrPersistRejected, `{"code":7,"msg":"eventsourced: persist rejected"}`},
		{"write conflict", journal.ErrWriteConflict, fmt.Sprintf(`{"code":8,"msg":%q}`, journal.ErrWriteConflict.Error())},
		{"buffer full", runtime.ErrBufferFull, `{"code":9,"msg":"sharding: region buffer full"}`},
		{"region stopped", runtime.ErrRegionStopped, `{"code":10,"msg":"sharding: region stopped"}`},
		{"other", errors.New("odd \"quoted\" <thing>"), `{"code":0,"msg":"odd \"quoted\" \u003cthing\u003e"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			to := remoteReplyTo(t, 7)
			before := sent.len()
			runtime.FailAsks(sys, askQuote{ReplyTo: to}, tc.err)
			got := sent.get()[before:]
			if len(got) != 1 {
				t.Fatalf("sent %d replies, want 1", len(got))
			}
			if got[0].to != to.Address() || got[0].manifest != entity.AskFailureManifest || got[0].payload != tc.want {
				t.Fatalf("sent %+v,\nwant payload %s under %q", got[0], tc.want, entity.AskFailureManifest)
			}
		})
	}
	if entity.AskFailureManifest != "shoal.reply.failed" {
		t.Fatalf("AskFailureManifest changed to %q", entity.AskFailureManifest)
	}
}

// failedAsk starts an ask on sys, captures its address, hands it payload
// under AskFailureManifest as if from another node, and returns the ask's
// error. The ask's deadline is an hour away: run it in a synctest bubble.
func failedAsk(t *testing.T, sys *entity.System, payload string) error {
	t.Helper()
	got := make(chan quoteCmd, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	res := askAsync(ctx, captureRef{sys, got}, func(to entity.ReplyTo[quote]) quoteCmd { return askQuote{ReplyTo: to} })
	to := (<-got).(askQuote).ReplyTo.Address()
	if err := runtime.DeliverReply(context.Background(), sys, to, entity.AskFailureManifest, []byte(payload)); err != nil && !errors.Is(err, entity.ErrReplyUndecodable) {
		t.Fatalf("DeliverReply: %v", err)
	}
	r := <-res
	if r.err == nil {
		t.Fatalf("ask answered %+v, want a failure", r.q)
	}
	if errors.Is(r.err, entity.ErrAskTimeout) {
		t.Fatalf("ask: %v: timed out", r.err)
	}
	if err := runtime.DeliverReply(context.Background(), sys, to, entity.AskFailureManifest, []byte(payload)); !errors.Is(err, entity.ErrAskEnded) {
		t.Fatalf("a second failure: %v, want ErrAskEnded", err)
	}
	return r.err
}

// Each code fails the ask with its sentinels, and every failure matches
// ErrAskFailed.
func TestAskFailureDecodesToSentinels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "a", 1 })
		for _, tc := range []struct {
			payload   string
			want, not []error
		}{
			{`{"code":1,"msg":"m"}`, []error{entity.ErrUnhandled}, []error{entity.ErrStopped}},
			{`{"code":2,"msg":"m"}`, []error{entity.ErrStopped}, []error{entity.ErrUnhandled}},
			{`{"code":3,"msg":"m"}`, []error{entity.ErrStopped}, nil},
			{`{"code":4,"msg":"m"}`, []error{entity.ErrMailboxFull}, nil},
			{`{"code":5,"also":[6],"msg":"m"}`, []error{runtime.ErrUnavailable, runtime.ErrPersistFailed}, []error{entity.ErrStopped}},
			{`{"code":6,"also":[2],"msg":"m"}`, []error{runtime.ErrPersistFailed, entity.ErrStopped}, nil},
			{`{"code":7,"msg":"m"}`, []error{runtime.ErrPersistRejected}, []error{runtime.ErrPersistFailed}},
			{`{"code":8,"msg":"m"}`, []error{journal.ErrWriteConflict}, []error{runtime.ErrPersistFailed}},
			{`{"code":9,"msg":"m"}`, []error{runtime.ErrBufferFull}, nil},
			{`{"code":10,"msg":"m"}`, []error{runtime.ErrRegionStopped}, nil},
			{`{"code":0,"msg":"m"}`, nil, []error{entity.ErrStopped, entity.ErrUnhandled}},
		} {
			err := failedAsk(t, sys, tc.payload)
			var failed *entity.AskFailedError
			if !errors.As(err, &failed) || !errors.Is(err, entity.ErrAskFailed) || failed.Message != "m" {
				t.Fatalf("%s: %v, want an *AskFailedError with message m", tc.payload, err)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("%s: %v does not match %v", tc.payload, err, w)
				}
			}
			for _, n := range tc.not {
				if errors.Is(err, n) {
					t.Errorf("%s: %v matches %v", tc.payload, err, n)
				}
			}
		}
		var pe *entity.PanicError
		if err := failedAsk(t, sys, `{"code":3,"msg":"boom"}`); !errors.As(err, &pe) || pe.Value != "boom" {
			t.Fatalf("crashed: %v, want a *PanicError of the message", err)
		}
	})
}

// A node of a newer version may send a code, or fields, this one does not
// know: the ask still fails at once, with ErrAskFailed and the message. A
// payload that does not decode at all fails it too, with
// ErrReplyUndecodable.
func TestAskFailureForwardCompatible(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		sys := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "a", 1 })
		err := failedAsk(t, sys, `{"code":4242,"also":[1,999],"msg":"from the future","detail":{"x":1}}`)
		var failed *entity.AskFailedError
		if !errors.As(err, &failed) || !errors.Is(err, entity.ErrAskFailed) || failed.Code != 4242 || failed.Message != "from the future" {
			t.Fatalf("unknown code: %v, want an *AskFailedError with code 4242", err)
		}
		if !errors.Is(err, entity.ErrUnhandled) { // the known code of also still counts
			t.Fatalf("unknown code with also [1]: %v, want ErrUnhandled too", err)
		}
		err = failedAsk(t, sys, `{"code":4242,"msg":"only new"}`)
		for _, s := range []error{entity.ErrStopped, entity.ErrUnhandled, runtime.ErrPersistFailed, runtime.ErrUnavailable} {
			if errors.Is(err, s) {
				t.Fatalf("unknown code alone: %v matches %v", err, s)
			}
		}
		err = failedAsk(t, sys, `not json`)
		if !errors.Is(err, entity.ErrAskFailed) || !errors.Is(err, entity.ErrReplyUndecodable) {
			t.Fatalf("undecodable failure: %v, want ErrAskFailed and ErrReplyUndecodable", err)
		}
	})
}

// pairRouter is a ReplyRouter between two Systems of one process: replies
// and failures cross as values.
type pairRouter struct{ systems map[string]*entity.System }

func (r pairRouter) RouteReply(to entity.ReplyAddress, v any) error {
	return runtime.DeliverLocalReply(r.systems[to.Node], to, v)
}

// A router that carries values, in process, carries the failure as it
// is, and it fails the ask on the other System.
func TestAskFailureThroughReplyRouter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "a", 1 })
		b := newSystem(t, func(c *entity.Config) { c.NodeID, c.Incarnation = "b", 1 })
		r := pairRouter{map[string]*entity.System{"a": a, "b": b}}
		runtime.SetReplyRouter(a, r)
		runtime.SetReplyRouter(b, r)
		got := make(chan quoteCmd, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		res := askAsync(ctx, captureRef{a, got}, func(to entity.ReplyTo[quote]) quoteCmd { return askQuote{ReplyTo: to} })
		runtime.FailAsks(b, <-got, fmt.Errorf("entity: ask: q unhandled: %w", entity.ErrUnhandled))
		err := (<-res).err
		var failed *entity.AskFailedError
		if !errors.As(err, &failed) || !errors.Is(err, entity.ErrUnhandled) || failed.Code != runtime.FailureUnhandled {
			t.Fatalf("ask: %v, want an *AskFailedError matching ErrUnhandled", err)
		}
	})
}
