package inproc_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/inproc"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/timers"
)

// Run delivers on the wall clock by itself: at each message's due time,
// in link order, and stops with its context.
func TestRunDeliversOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := codec.NewRegistry()
		codec.MustRegister[msg](reg, "msg")
		net, err := inproc.NewNetwork(inproc.Config{Codec: reg, Clock: timers.Real{}})
		if err != nil {
			t.Fatal(err)
		}
		net.SetDelay("a", "b", 100*time.Millisecond, 100*time.Millisecond)
		var (
			mu  sync.Mutex
			got []string
			at  []time.Duration
		)
		start := time.Now()
		a := join(t, net, "a", 1, ignore)
		join(t, net, "b", 1, func(from cluster.UniqueAddress, m any) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, from.Node)
			at = append(at, time.Since(start))
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error)
		go func() { done <- net.Run(ctx) }()

		b := cluster.UniqueAddress{Node: "b", Incarnation: 1}
		must(t, a.Send(b, msg{Seq: 1}))
		time.Sleep(50 * time.Millisecond)
		must(t, a.Send(b, msg{Seq: 2}))
		synctest.Wait()
		mu.Lock()
		if len(got) != 0 {
			t.Errorf("delivered %v before any delay passed", got)
		}
		mu.Unlock()
		time.Sleep(time.Second)
		synctest.Wait()
		mu.Lock()
		if want := []time.Duration{100 * time.Millisecond, 150 * time.Millisecond}; !slices.Equal(at, want) {
			t.Errorf("delivered at %v, want %v", at, want)
		}
		mu.Unlock()
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("Run returned %v, want context.Canceled", err)
		}
	})
}
