package entity_test

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/entity"
	"github.com/shoal-dev/shoal/timers"
)

// An entity with a 5s receive timeout and a 1s periodic timer: by default
// the ticks do not count as activity, so the entity still goes idle; with
// timers.ResetsReceiveTimeout they keep it alive, as other messages do.
func TestTimerMessagesDoNotResetReceiveTimeoutByDefault(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []timers.Option
		want []at
	}{
		{"default", nil, []at{{"idle", 5 * time.Second}, {"idle", 10 * time.Second}}},
		{"ResetsReceiveTimeout", []timers.Option{timers.ResetsReceiveTimeout()}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sys := newSystem(t)
				start := time.Now()
				var got recorder[at]
				ticks := 0
				props := &entity.Props[string]{Key: stringKey, Create: func(ctx entity.Context[string]) entity.Behavior[string] {
					ctx.SetReceiveTimeout(5*time.Second, "idle")
					ctx.Timers().StartTimerWithFixedDelay("tick", "tick", time.Second, time.Second, tc.opts...)
					return entity.Receive(func(ctx entity.Context[string], m string) entity.Behavior[string] {
						switch m {
						case "tick":
							ticks++
						case "stop":
							return entity.Stopped[string]()
						default:
							got.add(at{m, time.Since(start)})
						}
						return entity.Same[string]()
					})
				}}
				c := entity.Spawn(sys, props, "idle")
				time.Sleep(12*time.Second + 500*time.Millisecond)
				mustTell(t, c, "stop")
				<-c.Done()
				if ticks != 12 {
					t.Fatalf("%d ticks in 12s, want 12", ticks)
				}
				if !slices.Equal(got.get(), tc.want) {
					t.Fatalf("receive timeouts %v, want %v", got.get(), tc.want)
				}
			})
		})
	}
}
