package peers

import (
	"bufio"
	"bytes"
	"context"
	"math"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// targets is how many target actors (entities) the second system hosts.
const targets = 20

// window bounds the tells sent and not yet arrived: a sender that outran
// the receiver would measure its own queue.
const window = 10_000

// peer is what a benchmark needs of a system pair: tell and ask the i-th
// target on the second system from the first, and the count of tells
// that arrived at the targets.
type peer struct {
	arrived *atomic.Int64
	tell    func(i int) error
	ask     func(ctx context.Context, i int) error
}

// results keeps the figures of one run of BenchmarkPeers, for the ratios
// between systems measured in the same run.
type results map[string]float64

// BenchmarkPeers runs the same measurements on Shoal and on the remoting
// of GoAkt v4.0.0 and protoactor-go: two systems on loopback TCP in one
// process, 20 targets on the second, an empty message, sent from the
// first. Per system: tell-1 and tell-8 are tells from 1 and 8 goroutines
// (tells/s from the first tell to the last arrival, cpu-µs/op the
// process's CPU time, user and system, per tell, both systems together);
// ask is one ask at a time (p50-µs, p99-µs); bytes is tells one at a time,
// each awaited, and the bytes the process wrote per tell (socket-B/tell,
// from /proc/self/io: every write of both systems, replies and
// acknowledgements included, so frames are not batched). Shoal also runs
// its local baselines on the first node: direct-tell-N to entity cells,
// sharded-tell-N through sharding to entities the node hosts; its remote
// results report ratios to them and to the peers of the same run.
//
//	go test -run '^$' -bench Peers -count 3 ./peers
func BenchmarkPeers(b *testing.B) {
	res := results{}
	b.Run("goakt", func(b *testing.B) {
		g := newGoAktPair(b, targets)
		defer g.close()
		runPeer(b, "goakt", g.peer(), res)
	})
	b.Run("protoactor", func(b *testing.B) {
		p := newProtoPair(b, targets)
		defer p.close()
		runPeer(b, "protoactor", p.peer(), res)
	})
	b.Run("shoal", func(b *testing.B) {
		s := newShoalPair(b, targets)
		defer s.close()
		for _, senders := range []int{1, 8} {
			n := strconv.Itoa(senders)
			b.Run("direct-tell-"+n, func(b *testing.B) {
				res["shoal/direct-tell-"+n] = benchTells(b, &s.arrived, tellTo(s.direct), senders)
			})
			b.Run("sharded-tell-"+n, func(b *testing.B) {
				rate := benchTells(b, &s.arrived, tellTo(s.local), senders)
				res["shoal/sharded-tell-"+n] = rate
				ratio(b, rate, res["shoal/direct-tell-"+n], "sharded/direct")
			})
		}
		runPeer(b, "shoal", s.peer(), res)
	})
}

// runPeer runs the remote measurements of one system.
func runPeer(b *testing.B, name string, p peer, res results) {
	for _, senders := range []int{1, 8} {
		n := strconv.Itoa(senders)
		b.Run("tell-"+n, func(b *testing.B) {
			rate := benchTells(b, p.arrived, p.tell, senders)
			res[name+"/tell-"+n] = rate
			if name == "shoal" {
				ratio(b, rate, res["shoal/direct-tell-"+n], "remote/direct")
				ratio(b, rate, res["goakt/tell-"+n], "vs-goakt")
				ratio(b, rate, res["protoactor/tell-"+n], "vs-protoactor")
			}
		})
	}
	b.Run("ask", func(b *testing.B) {
		p50 := benchAsks(b, p.ask)
		res[name+"/ask-p50"] = p50
		if name == "shoal" {
			ratio(b, p50, res["goakt/ask-p50"], "p50-vs-goakt")
			ratio(b, p50, res["protoactor/ask-p50"], "p50-vs-protoactor")
		}
	})
	b.Run("bytes", func(b *testing.B) { benchBytes(b, p) })
}

// ratio reports v/base when base was measured.
func ratio(b *testing.B, v, base float64, unit string) {
	if base > 0 {
		b.ReportMetric(v/base, unit)
	}
}

// benchTells sends b.N tells round-robin over the targets from senders
// goroutines and waits until all arrived; it reports and returns tells/s.
func benchTells(b *testing.B, arrived *atomic.Int64, tell func(int) error, senders int) float64 {
	base := arrived.Load()
	var sent atomic.Int64
	var failed atomic.Pointer[error]
	b.ResetTimer()
	cpu0, t0 := cpuTime(), time.Now()
	var wg sync.WaitGroup
	for s := range senders {
		wg.Go(func() {
			for i := s; i < b.N; i += senders {
				for sent.Load()-(arrived.Load()-base) >= window {
					pause()
				}
				if err := tell(i); err != nil {
					failure := err // its own variable: err moved to the heap would cost every tell an allocation
					failed.CompareAndSwap(nil, &failure)
					return
				}
				sent.Add(1)
			}
		})
	}
	wg.Wait()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	awaitArrived(b, arrived, base+int64(b.N))
	elapsed, cpu := time.Since(t0), cpuTime()-cpu0
	b.StopTimer()
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "tells/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	return rate
}

// pause lets a waiting sender give way. It sleeps rather than yields: a
// goroutine that only yields is picked again at once, and the scheduler
// polls the network of an otherwise busy process only every 10 ms or so.
func pause() { time.Sleep(20 * time.Microsecond) }

// awaitArrived waits until arrived reaches want.
func awaitArrived(b *testing.B, arrived *atomic.Int64, want int64) {
	deadline := time.Now().Add(time.Minute)
	for arrived.Load() < want {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d tells arrived within a minute", arrived.Load(), want)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// benchAsks asks b.N times, one at a time, round-robin over the targets;
// it reports the median and 99th percentile and returns the median, in µs.
func benchAsks(b *testing.B, ask func(context.Context, int) error) float64 {
	lat := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		t0 := time.Now()
		if err := ask(ctx, i); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	p50, p99 := percentile(lat, 0.50), percentile(lat, 0.99)
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(p99.Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	return float64(p50.Nanoseconds()) / 1e3
}

// benchBytes tells b.N times (at most 2000: the figure does not move),
// each once the one before arrived, and reports the bytes the process
// wrote per tell.
func benchBytes(b *testing.B, p peer) {
	n := min(b.N, 2000)
	base := p.arrived.Load()
	w0, ok := bytesWritten()
	if !ok {
		b.Skip("no /proc/self/io here")
	}
	b.ResetTimer()
	for i := range n {
		if err := p.tell(i); err != nil {
			b.Fatal(err)
		}
		for p.arrived.Load() < base+int64(i+1) {
			pause()
		}
	}
	b.StopTimer()
	w1, _ := bytesWritten()
	b.ReportMetric(float64(w1-w0)/float64(n), "socket-B/tell")
}

// percentile is the nearest-rank q-quantile of lat; it sorts lat.
func percentile(lat []time.Duration, q float64) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	slices.Sort(lat)
	return lat[min(len(lat)-1, max(0, int(math.Ceil(q*float64(len(lat))))-1))]
}

// cpuTime is the CPU time, user and system, the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bytesWritten is what the process passed to write(2) and its kin so
// far (wchar of /proc/self/io): here, the sockets between the systems.
func bytesWritten() (int64, bool) {
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0, false
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("wchar: ")); ok {
			n, err := strconv.ParseInt(string(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
