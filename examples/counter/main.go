// Command counter shows a persistent entity surviving a restart: it
// increments a Counter, stops it, starts a new incarnation that recovers
// its value from the journal, and asks it for the value.
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
	"github.com/shoal-dev/shoal/journal/memory"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	reg := codec.NewRegistry()
	Register(reg)
	sys, err := entity.NewSystem(entity.Config{Codec: reg, Journal: memory.New()})
	if err != nil {
		return err
	}
	props := &entity.Props[Command]{Key: CounterKey, Create: NewCounter}
	get := func(ref entity.Ref[Command]) (int, error) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		return entity.Ask(ctx, ref, func(r entity.ReplyTo[int]) Command { return Get{ReplyTo: r} })
	}

	first := entity.Spawn(sys, props, "counter-1")
	for _, by := range []int{1, 2, 3} {
		if err := first.Tell(Increment{By: by}); err != nil {
			return err
		}
		fmt.Fprintf(out, "told counter-1: Increment{By: %d}\n", by)
	}
	n, err := get(first)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "counter-1 = %d\n", n)

	if err := first.Tell(Stop{}); err != nil {
		return err
	}
	<-first.Done()
	fmt.Fprintln(out, "counter-1 stopped; starting a new incarnation")

	second := entity.Spawn(sys, props, "counter-1")
	n, err = get(second)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "counter-1 recovered from the journal = %d\n", n)
	if n != 6 {
		return fmt.Errorf("recovered %d, want 6", n)
	}
	return nil
}
