package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// The simulator remembers only its latest requests: a long load run must
// not grow it without bound.
func TestSimulatorKeepsOnlyTheLatestRequests(t *testing.T) {
	const keep, sent = 10, 1000
	sim := NewSimulator()
	sim.KeepReceived = keep
	for i := range sent {
		body := `{"mti":"0100","transactionId":"` + strconv.Itoa(i) + `"}`
		rec := httptest.NewRecorder()
		sim.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/payment", strings.NewReader(body)))
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: %d", i, rec.Code)
		}
	}
	got := sim.Received()
	if len(got) != keep || got[0].TransactionID != strconv.Itoa(sent-keep) || got[keep-1].TransactionID != strconv.Itoa(sent-1) {
		t.Fatalf("received %d requests, first %+v: want the last %d", len(got), got[0], keep)
	}
	if n := sim.ReceivedCount(); n != sent {
		t.Fatalf("count %d, want %d", n, sent)
	}
	sim.mu.Lock()
	held := cap(sim.received)
	sim.mu.Unlock()
	if held > 2*keep {
		t.Fatalf("the simulator holds room for %d requests, want at most %d", held, 2*keep)
	}
}
