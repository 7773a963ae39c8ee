package tcp_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// A frame a sender writes itself, on a quiet link, that the socket takes
// only in part (the receiver has stopped reading) is finished by the
// link's goroutine, ahead of the frames queued behind it: every frame
// arrives whole and in order once the receiver reads again.
func TestInlineWritesCutShortArriveWholeAndInOrder(t *testing.T) {
	reg := benchRegistry()
	for name, send := range map[string]func(tr *tcp.Transport, to cluster.UniqueAddress, m benchMsg) error{
		"Send": func(tr *tcp.Transport, to cluster.UniqueAddress, m benchMsg) error { return tr.Send(to, m) },
		"SendEncoded": func(tr *tcp.Transport, to cluster.UniqueAddress, m benchMsg) error {
			manifest, payload, err := reg.Encode(m)
			if err != nil {
				return err
			}
			return tr.SendEncoded(to, manifest, payload)
		},
	} {
		t.Run(name, func(t *testing.T) { testInlineWritesCutShort(t, send) })
	}
}

func testInlineWritesCutShort(t *testing.T, send func(*tcp.Transport, cluster.UniqueAddress, benchMsg) error) {
	const frames = 600
	release := make(chan struct{})
	var mu sync.Mutex
	var got []int
	done := make(chan struct{})
	nw := newNetwork(t, benchRegistry(), func(c *tcp.Config) { c.WriteTimeout = time.Minute })
	nw.capacity, nw.maxFrame = frames, 1<<20
	a := nw.start(t, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	nw.start(t, addr("b", 1), func(_ cluster.UniqueAddress, msg any) {
		<-release // b reads one frame, then stops until the test lets it go on
		m := msg.(benchMsg)
		if len(m.EntityID) != 32<<10 || strings.Trim(m.EntityID, "x") != "" {
			t.Errorf("frame %d arrived with a body of %d bytes, not whole", m.Seq, len(m.EntityID))
		}
		mu.Lock()
		got = append(got, m.Seq)
		if len(got) == frames {
			close(done)
		}
		mu.Unlock()
	}, "")
	body := strings.Repeat("x", 32<<10)
	for i := range frames {
		if err := send(a, addr("b", 1), benchMsg{EntityID: body, Seq: i}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		time.Sleep(50 * time.Microsecond) // a quiet link: the next frame goes inline
	}
	close(release)
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("%d of %d frames arrived", len(got), frames)
	}
	for i, seq := range got {
		if seq != i {
			t.Fatalf("frame %d arrived in place %d", seq, i)
		}
	}
}
