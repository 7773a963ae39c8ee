package faultnet_test

import (
	"errors"
	"io"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/cluster/memberlist/faultnet"
)

// received drains what t has been sent so far.
func received(t *faultnet.Transport) []string {
	var got []string
	for {
		select {
		case p := <-t.PacketCh():
			got = append(got, string(p.Buf))
		default:
			return got
		}
	}
}

func TestPacketsArriveWithTheSendersAddress(t *testing.T) {
	n := faultnet.NewNetwork(1)
	a, b := n.NewTransport(), n.NewTransport()
	buf := []byte("ping")
	if _, err := a.WriteTo(buf, b.Addr()); err != nil {
		t.Fatal(err)
	}
	buf[0] = 'X' // the sender may reuse its buffer
	p := <-b.PacketCh()
	if string(p.Buf) != "ping" || p.From.String() != a.Addr() {
		t.Fatalf("got %q from %s, want ping from %s", p.Buf, p.From, a.Addr())
	}
}

func TestLossDropsPacketsSilently(t *testing.T) {
	n := faultnet.NewNetwork(1)
	a, b := n.NewTransport(), n.NewTransport()
	n.SetLoss(1)
	for range 10 {
		if _, err := a.WriteTo([]byte("x"), b.Addr()); err != nil {
			t.Fatalf("a lost packet returned %v: UDP cannot tell", err)
		}
	}
	if got := received(b); len(got) != 0 {
		t.Fatalf("loss 1: %d packets arrived", len(got))
	}
	n.SetLoss(0.5)
	for range 200 {
		_, _ = a.WriteTo([]byte("x"), b.Addr())
	}
	if got := len(received(b)); got == 0 || got == 200 {
		t.Fatalf("loss 0.5: %d of 200 arrived", got)
	}
}

func TestPartitionCutsPacketsDialsAndOpenStreamsUntilHealed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := faultnet.NewNetwork(1)
		a, b, c := n.NewTransport(), n.NewTransport(), n.NewTransport()
		accepted := make(chan net.Conn, 1)
		go func() { accepted <- <-b.StreamCh() }()
		conn, err := a.DialTimeout(b.Addr(), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		server := <-accepted

		n.Partition([]string{a.Addr()}, []string{b.Addr()})
		if _, err := conn.Read(make([]byte, 1)); !errors.Is(err, io.ErrClosedPipe) && !errors.Is(err, io.EOF) {
			t.Errorf("read on a stream across a new cut = %v, want closed", err)
		}
		if _, err := server.Write([]byte("x")); err == nil {
			t.Errorf("write on the other end of a cut stream succeeded")
		}
		if _, err := a.DialTimeout(b.Addr(), time.Second); !errors.Is(err, faultnet.ErrUnreachable) {
			t.Errorf("dial across the cut = %v, want ErrUnreachable", err)
		}
		_, _ = a.WriteTo([]byte("lost"), b.Addr())
		_, _ = a.WriteTo([]byte("to c"), c.Addr())
		if got := received(b); len(got) != 0 {
			t.Errorf("b got %v across the cut", got)
		}
		if got := received(c); len(got) != 1 {
			t.Errorf("c got %v, want its packet: its links were not cut", got)
		}

		n.Heal()
		_, _ = a.WriteTo([]byte("healed"), b.Addr())
		if got := received(b); len(got) != 1 || got[0] != "healed" {
			t.Errorf("after Heal b got %v", got)
		}
		go func() { <-b.StreamCh() }()
		if _, err := a.DialTimeout(b.Addr(), time.Second); err != nil {
			t.Errorf("dial after Heal: %v", err)
		}
	})
}

func TestShutdownStopsAnAddressAnswering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := faultnet.NewNetwork(1)
		a, b := n.NewTransport(), n.NewTransport()
		if err := b.Shutdown(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.DialTimeout(b.Addr(), time.Second); !errors.Is(err, faultnet.ErrUnreachable) {
			t.Errorf("dial to a shut down transport = %v, want ErrUnreachable", err)
		}
		if _, err := b.DialTimeout(a.Addr(), time.Second); !errors.Is(err, faultnet.ErrClosed) {
			t.Errorf("dial from a shut down transport = %v, want ErrClosed", err)
		}
		if _, err := a.DialTimeout(b.Addr(), time.Second); err == nil {
			t.Errorf("second dial succeeded")
		}
	})
}
