package tcp

import (
	"testing"

	"github.com/shoal-dev/shoal/cluster"
)

// BenchmarkSendEncodedQueued is the sender's share of SendEncoded alone:
// a frame of a tell's size marshalled into the queue of a link that is
// not connected, drained every 128 frames as its writer would.
func BenchmarkSendEncodedQueued(b *testing.B) {
	self, to := cluster.UniqueAddress{Node: "shoal-1", Incarnation: 1}, cluster.UniqueAddress{Node: "shoal-2", Incarnation: 1}
	tr := &Transport{cfg: Config{Self: self, MaxFrameSize: 4096, MaxBatchBytes: 64 << 10, QueueCapacity: 1 << 20}}
	l := newLink(tr, to)
	tr.lastLink.Store(l)
	payload := make([]byte, 40)
	var batch []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if err := tr.SendEncoded(to, "shoal.sharding", payload); err != nil {
			b.Fatal(err)
		}
		if i%128 == 127 {
			batch, _, _ = l.take(batch[:0], nil, nil)
			l.mu.Lock()
			l.writing = false
			l.mu.Unlock()
		}
	}
}
