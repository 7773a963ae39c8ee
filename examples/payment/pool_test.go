package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Calls to the issuer reuse connections: rounds of concurrent calls open
// no more connections than are in flight at once.
func TestIssuerClientReusesConnections(t *testing.T) {
	const concurrency, rounds = 16, 8
	arrived, release := make(chan struct{}), make(chan struct{})
	var opened atomic.Int64
	issuer := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"intranid":"I","authId":"1","rErrcode":"00000"}`))
	}))
	issuer.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	issuer.Start()
	t.Cleanup(issuer.Close)

	client := NewIssuerClient(IssuerClientConfig{URL: issuer.URL, ResponseTimeout: time.Minute}, nil)
	for range rounds {
		var calls sync.WaitGroup
		for range concurrency {
			calls.Go(func() {
				if _, err := client.Authorize(context.Background(), IssuerRequest{}); err != nil {
					t.Error(err)
				}
			})
		}
		// Every call of the round holds a connection at once.
		for range concurrency {
			<-arrived
		}
		for range concurrency {
			release <- struct{}{}
		}
		calls.Wait()
	}
	if n := opened.Load(); n > concurrency {
		t.Fatalf("%d calls in rounds of %d opened %d connections, want at most %d", concurrency*rounds, concurrency, n, concurrency)
	}
}

func TestIssuerTransportSizedByConfig(t *testing.T) {
	tr := newIssuerTransport(IssuerClientConfig{MaxIdleConns: 300, DialTimeout: 2 * time.Second, IdleConnTimeout: time.Minute})
	if tr.MaxIdleConnsPerHost != 300 || tr.MaxIdleConns != 300 || tr.IdleConnTimeout != time.Minute || tr.TLSHandshakeTimeout != 2*time.Second {
		t.Fatalf("transport idle per host %d, idle %d, idle timeout %v, TLS %v", tr.MaxIdleConnsPerHost, tr.MaxIdleConns, tr.IdleConnTimeout, tr.TLSHandshakeTimeout)
	}
}
