package v1_test

import (
	"encoding/hex"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	v1 "github.com/shoal-dev/shoal/sharding/internal/wire/wiretest/v1"
)

// The frozen copy writes what a node of version 1 wrote: these bytes were
// taken from that release's encoder (frame.Encode of wire.Seal of a
// Deliver of test.Add{N: 5}), not from this copy.
func TestFrozenBytesAreVersionOnes(t *testing.T) {
	const written = "01036f6c6401036e6577011673686f616c2e7368617264696e672e44656c697665727a7b22746f223a7b2274797065223a22636f756e746572227d2c227368617264223a2233222c22656e746974794944223a22632d31222c226d7367223a7b226d223a22746573742e416464222c2270223a2265794a4f496a6f3166513d3d227d2c227374617274223a66616c73652c2261736b223a66616c73657d"
	f := v1.Frame{
		From: cluster.UniqueAddress{Node: "old", Incarnation: 1}, To: cluster.UniqueAddress{Node: "new", Incarnation: 1},
		Manifest: v1.DeliverManifest, Payload: v1.Deliver("counter", "3", "c-1", "test.Add", []byte(`{"N":5}`)),
	}
	if got := hex.EncodeToString(f.Append(nil)[4:]); got != written {
		t.Fatalf("the frozen copy writes\n%s\nversion 1 wrote\n%s", got, written)
	}
}
