package remote_test

import (
	"errors"
	"github.com/shoal-dev/shoal/internal/logtest"
	"log/slog"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/entity/codec"
	"github.com/shoal-dev/shoal/sharding/internal/protocol"
	"github.com/shoal-dev/shoal/sharding/internal/remote"
	"github.com/shoal-dev/shoal/sharding/internal/wire"
)

// Mail for a region that shut down here is expected while the others'
// views catch up (a node leaving): refused and counted, but no warning.
// Mail for a target that never listened here still warns.
func TestMailForAStoppedListenerIsRefusedWithoutAWarning(t *testing.T) {
	rec := &logtest.Recorder{}
	self := cluster.UniqueAddress{Node: "b", Incarnation: 2}
	from := cluster.UniqueAddress{Node: "a", Incarnation: 1}
	tr, err := remote.New(self, remote.Config{Codec: codec.NewRegistry(), Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	stop, err := tr.Listen(remote.Address{Node: self, Type: "Ops"}, func(protocol.Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	register := func(typ string) error {
		return tr.Receive(from, wire.Envelope{To: wire.Target{Type: typ}, Msg: protocol.Register{Region: from}})
	}
	if err := register("Ops"); err != nil {
		t.Fatalf("delivered to the listener: %v", err)
	}
	stop()
	if err := register("Ops"); !errors.Is(err, remote.ErrUnknownTarget) {
		t.Fatalf("after the listener stopped: %v, want ErrUnknownTarget", err)
	}
	if n := tr.Stats().UnknownTarget; n != 1 {
		t.Fatalf("UnknownTarget = %d, want 1", n)
	}
	if len(rec.Warns()) != 0 {
		t.Fatalf("warned of mail for a stopped listener:\n%s", strings.Join(rec.Warns(), "\n"))
	}
	if err := register("Never"); !errors.Is(err, remote.ErrUnknownTarget) || rec.Count("no listener for target") != 1 {
		t.Fatalf("mail for a target never here: %v, warnings %q", err, rec.Warns())
	}
}
