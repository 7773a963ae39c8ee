// Command counter shows a persistent entity surviving a restart: it
// increments a Counter through sharding, shuts the node down (the entity
// is handed off through its stop message), starts a new node on the same
// journal, and asks the Counter, which recovers its value from the events.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/journal"
	"github.com/shoal-dev/shoal/journal/memory"
	"github.com/shoal-dev/shoal/sharding"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	events := memory.New() // outlives both nodes, as a database would

	first, counters, err := startNode(events)
	if err != nil {
		return err
	}
	ref := counters.EntityRefFor("counter-1")
	for _, by := range []int{1, 2, 3} {
		if err := ref.Tell(Increment{By: by}); err != nil {
			return err
		}
		fmt.Fprintf(out, "told counter-1: Increment{By: %d}\n", by)
	}
	n, err := get(ctx, ref)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "counter-1 = %d\n", n)

	if err := first.Shutdown(ctx); err != nil {
		return err
	}
	fmt.Fprintln(out, "node shut down; starting a new one on the same journal")

	second, counters, err := startNode(events)
	if err != nil {
		return err
	}
	defer second.Shutdown(ctx)
	n, err = get(ctx, counters.EntityRefFor("counter-1"))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "counter-1 recovered from the journal = %d\n", n)
	if n != 6 {
		return fmt.Errorf("recovered %d, want 6", n)
	}
	return nil
}

// startNode starts a runtime with sharding and the Counter entity type.
func startNode(events journal.Journal) (*sharding.Sharding, *sharding.Region[Command], error) {
	reg := codec.NewRegistry()
	Register(reg)
	sys, err := entity.NewSystem(entity.Config{Codec: reg, Journal: events})
	if err != nil {
		return nil, nil, err
	}
	node, err := sharding.New(sys, sharding.Config{})
	if err != nil {
		return nil, nil, err
	}
	counters, err := sharding.Init(node, sharding.Entity[Command]{Key: CounterKey, Create: NewCounter, StopMessage: Stop{}})
	if err != nil {
		return nil, nil, err
	}
	return node, counters, nil
}

func get(ctx context.Context, ref entity.Ref[Command]) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return entity.Ask(ctx, ref, func(r entity.ReplyTo[int]) Command { return Get{ReplyTo: r} })
}
