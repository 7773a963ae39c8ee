package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkAPICycle measures one order through the load generator's mix,
// settle → settle → cancel → cancel, in memory mode: the API handler (its
// parsing, the ask, the JSON answer), the payment entity (recovery,
// persists, timers, passivation) and two issuer calls to the simulator
// over loopback. The handler is called directly, so the client's side and
// the API's own HTTP server are left out (http.NewRequest, not httptest's,
// which reads each request through a new 4 KB buffer). Run it with -benchmem: allocs/op
// are per order, four requests. cpu-ns/op is the process's CPU time per
// order, which a busy machine disturbs less than the time per order.
func BenchmarkAPICycle(b *testing.B) {
	n := startNode(b, nil)
	h := n.api.Handler
	var orders atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(32) // 64 clients on 2 processors, as the load generator's default run
	b.ResetTimer()
	cpu := processCPU(b)
	defer func() { b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op") }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			base := fmt.Sprintf("/00/ec/settlements/shop-1/b%d/", orders.Add(1))
			for _, step := range []struct{ path, body string }{
				{"payment", `{"amount":1000}`}, {"payment", `{"amount":1000}`}, {"cancel", ""}, {"cancel", ""},
			} {
				req, err := http.NewRequest(http.MethodPut, base+step.path, strings.NewReader(step.body))
				if err != nil {
					b.Error(err)
					return
				}
				req.Header.Set("X-Tenant-Id", "example")
				req.Header.Set("Authorization", "Bearer dummy")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Errorf("%s %s: %d %s", step.path, base, rec.Code, rec.Body)
					return
				}
			}
		}
	})
}

// processCPU is the CPU time, user and system, this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
