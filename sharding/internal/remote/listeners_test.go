package remote_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
)

// Each message reaches the listener of its own target, the region's or
// the coordinator's, however many listen on the node, and none after its
// listener stopped.
func TestEachTargetReachesItsListener(t *testing.T) {
	self := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	for _, types := range []int{1, 3, 20} {
		t.Run(fmt.Sprint(types, " types"), func(t *testing.T) {
			tr, err := remote.New(self, remote.Config{Codec: newCodec(), Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			got := map[remote.Address]string{}
			var addrs []remote.Address
			stops := map[remote.Address]func(){}
			for i := range types {
				for _, coordinator := range []bool{false, true} {
					addr := remote.Address{Node: self, Type: fmt.Sprint("type-", i), Coordinator: coordinator}
					stop, err := tr.ListenDelivers(addr,
						func(protocol.Message) error { return nil },
						func(d protocol.Deliver) error { got[addr] = d.EntityID; return nil })
					if err != nil {
						t.Fatal(err)
					}
					addrs, stops[addr] = append(addrs, addr), stop
				}
			}
			for _, addr := range addrs {
				if err := tr.SendDeliver(addr, &protocol.Deliver{EntityID: addr.String(), Start: true}); err != nil {
					t.Fatal(err)
				}
			}
			for _, addr := range addrs {
				if got[addr] != addr.String() {
					t.Fatalf("%s's listener got %q", addr, got[addr])
				}
			}
			last := addrs[len(addrs)-1]
			stops[last]()
			delete(got, last)
			if err := tr.SendDeliver(last, &protocol.Deliver{EntityID: "late", Start: true}); !errors.Is(err, remote.ErrUnknownTarget) {
				t.Fatalf("a Deliver for %s, stopped: %v, want ErrUnknownTarget", last, err)
			}
			if err := tr.SendDeliver(addrs[0], &protocol.Deliver{EntityID: "again", Start: true}); err != nil || got[addrs[0]] != "again" {
				t.Fatalf("after another stopped, %s's listener got %q, %v", addrs[0], got[addrs[0]], err)
			}
		})
	}
}
