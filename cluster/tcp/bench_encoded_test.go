//go:build unix

package tcp_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/tcp"
)

// BenchmarkLoopbackEncoded is BenchmarkLoopback's tcp case for frames sent
// encoded (SendEncoded) to an EncodedHandler, as sharding sends tells: the
// transport's own work, with no codec on either end. cpu-ns/op is the
// process's CPU time (user and system, both ends) per message.
func BenchmarkLoopbackEncoded(b *testing.B) {
	reg := benchRegistry()
	manifest, payload, err := reg.Encode(sample)
	if err != nil {
		b.Fatal(err)
	}
	c := newCounter(b.N + 1)
	nw := newNetwork(b, reg, nil)
	nw.capacity = tcp.DefaultQueueCapacity
	a := nw.start(b, addr("a", 1), func(cluster.UniqueAddress, any) {}, "")
	to := addr("b", 1)
	rcv := nw.start(b, to, func(cluster.UniqueAddress, any) {}, "")
	rcv.HandleEncoded(manifest, func(from cluster.UniqueAddress, _ []byte) error {
		c.handle(from, nil)
		return nil
	})
	if err := a.SendEncoded(to, manifest, payload); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := a.Flush(ctx, to); err != nil {
		b.Fatal(err)
	}
	cpu0 := cpuTime()
	b.ResetTimer()
	pumpWith(b, func() error { return a.SendEncoded(to, manifest, payload) }, c, b.N)
	b.StopTimer()
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
