package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/eventsourced/eventsourcedtest"
)

func TestRunRecoversAfterRestart(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "recovered from the journal = 6") {
		t.Fatalf("output:\n%s", out.String())
	}
}

func TestCounterWithTestKit(t *testing.T) {
	reg := codec.NewRegistry()
	Register(reg)
	kit := eventsourcedtest.New[Command, Event, State](t, CounterKey, NewCounter, eventsourcedtest.Options{Codec: reg})
	res := kit.RunCommand(Increment{By: 5})
	if len(res.Events) != 1 || res.Events[0] != (Incremented{By: 5}) || res.State.Value != 5 {
		t.Fatalf("result = %+v", res)
	}
	kit.Restart()
	got := eventsourcedtest.RunCommandWithReply(kit, func(r entity.ReplyTo[int]) Command { return Get{ReplyTo: r} })
	if !got.Replied || got.Reply != 5 || len(got.Events) != 0 {
		t.Fatalf("after restart: %+v", got)
	}
	kit.ExpectStop()
	if res := kit.RunCommand(Stop{}); !res.Stopped || res.Err != nil {
		t.Fatalf("stop: %+v", res)
	}
}
