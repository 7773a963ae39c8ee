package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The original's gateway table (gateway.go) against the simulator:
// in-process, in synctest bubbles, with the original's timeouts; and once
// over a real socket for a refused connection.

func testIssuerClient(url string) *IssuerClient {
	return NewIssuerClient(IssuerClientConfig{
		URL:             url,
		ResponseTimeout: 100 * time.Millisecond,
		RetryAttempts:   2,
		RetryDelay:      time.Millisecond,
	}, nil)
}

var testIssuerRequest = IssuerRequest{PAN: "4000", AmountTran: "000000001000", TranDateTime: "0101170000",
	TransactionID: "000000000001", AcceptorID: "store1         ", PaymentID: "00001", TerminalID: "T1"}

func mtis(reqs []IssuerRequest) []string {
	out := make([]string, len(reqs))
	for i, r := range reqs {
		out[i] = r.MTI
	}
	return out
}

// The gateway table, row by row, with the original's timeouts (3s per
// request, a failure-cancel retried twice 1s apart) on synctest's clock:
// the client calls the simulator in-process, so each row also checks how
// long it took.
func TestIssuerClient(t *testing.T) {
	const fc = "failure cancel"
	for _, tc := range []struct {
		name    string
		reverse bool
		rules   []Rule
		want    *Failure // nil for an answer
		errCode string
		mtis    []string
		took    time.Duration
	}{
		{name: "approved", rules: nil, errCode: ErrCodeOK, mtis: []string{"0100"}},
		{name: "error code is an answer", rules: []Rule{{Reaction: Reaction{ErrCode: "TW005"}}}, errCode: "TW005", mtis: []string{"0100"}},
		{name: "400", rules: []Rule{{Reaction: Reaction{Status: 400}}},
			want: ptr(IssuingServiceBadRequest("authorization")), mtis: []string{"0100"}},
		{name: "reversal 400", reverse: true, rules: []Rule{{Reaction: Reaction{Status: 400}}},
			want: ptr(IssuingServiceBadRequest("reversal")), mtis: []string{"0400"}},
		{name: "404 is a server error", rules: []Rule{{Reaction: Reaction{Status: 404}}},
			want: ptr(IssuingServiceServerError("authorization", "-")), mtis: []string{"0100"}},
		{name: "503 then failure-cancel answered", rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}},
			want: ptr(IssuingServiceUnavailable(fc)), mtis: []string{"0100", "0120"}},
		{name: "reversal 500 then failure-cancel 0420", reverse: true, rules: []Rule{{MTI: "0400", Reaction: Reaction{Status: 500}}},
			want: ptr(IssuingServiceUnavailable(fc)), mtis: []string{"0400", "0420"}},
		{name: "garbage body then failure-cancel", rules: []Rule{{MTI: "0100", Reaction: Reaction{Garbage: true}}},
			want: ptr(IssuingServiceUnavailable(fc)), mtis: []string{"0100", "0120"}},
		{name: "failure-cancel 400", rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}, {Reaction: Reaction{Status: 400}}},
			want: ptr(IssuingServiceBadRequest(fc)), mtis: []string{"0100", "0120"}},
		{name: "failure-cancel 404 is a server error, not retried",
			rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}, {Reaction: Reaction{Status: 404}}},
			want:  ptr(IssuingServiceServerError(fc, "-")), mtis: []string{"0100", "0120"}},
		{name: "failure-cancel 5xx retried twice, 1s apart", rules: []Rule{{Reaction: Reaction{Status: 502}}},
			want: ptr(IssuingServiceServerError(fc, "-")), mtis: []string{"0100", "0120", "0120", "0120"}, took: 2 * time.Second},
		{name: "failure-cancel 5xx, then answered on retry",
			rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}, {MTI: "0120", Times: 1, Reaction: Reaction{Status: 500}}},
			want:  ptr(IssuingServiceUnavailable(fc)), mtis: []string{"0100", "0120", "0120"}, took: time.Second},
		{name: "failure-cancel timeout, then answered on retry",
			rules: []Rule{{MTI: "0100", Reaction: Reaction{Hang: true}}, {MTI: "0120", Times: 1, Reaction: Reaction{Hang: true}}},
			want:  ptr(IssuingServiceUnavailable(fc)), mtis: []string{"0100", "0120", "0120"}, took: 3*time.Second + 3*time.Second + time.Second},
		{name: "hang: timeouts all the way", rules: []Rule{{Reaction: Reaction{Hang: true}}},
			want: ptr(TimeOut(fc)), mtis: []string{"0100", "0120", "0120", "0120"}, took: 4*3*time.Second + 2*time.Second},
		{name: "slow answer within the timeout", rules: []Rule{{Reaction: Reaction{Latency: 2900 * time.Millisecond}}},
			errCode: ErrCodeOK, mtis: []string{"0100"}, took: 2900 * time.Millisecond},
		{name: "slow answer past the timeout", rules: []Rule{{MTI: "0100", Reaction: Reaction{Latency: 4 * time.Second}}},
			want: ptr(IssuingServiceUnavailable(fc)), mtis: []string{"0100", "0120"}, took: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				sim := NewSimulator()
				sim.SetRules(tc.rules...)
				c := simulatedIssuer(sim, nil)
				call := c.Authorize
				if tc.reverse {
					call = c.Reverse
				}
				start := time.Now()
				resp, err := call(context.Background(), testIssuerRequest)
				if took := time.Since(start); took != tc.took {
					t.Errorf("took %v, want %v", took, tc.took)
				}
				if tc.want == nil {
					if err != nil || resp.ErrCode != tc.errCode {
						t.Fatalf("got %+v, %v; want code %s", resp, err, tc.errCode)
					}
				} else if f, ok := err.(Failure); !ok || f != *tc.want {
					t.Fatalf("got %+v, %v; want %v", resp, err, *tc.want)
				}
				if got := mtis(sim.Received()); !slices.Equal(got, tc.mtis) {
					t.Fatalf("issuer received %v, want %v", got, tc.mtis)
				}
			})
		})
	}
}

func ptr[T any](v T) *T { return &v }

// Closing the simulator drops the requests it holds: a hang never becomes
// an answer.
func TestSimulatorCloseDropsHeldRequests(t *testing.T) {
	for _, r := range []Reaction{{Hang: true}, {Latency: time.Hour}} {
		synctest.Test(t, func(t *testing.T) {
			sim := NewSimulator()
			sim.SetRules(Rule{Reaction: r})
			client := &http.Client{Transport: handlerTransport{sim}}
			done := make(chan error, 1)
			go func() {
				resp, err := client.Post("http://issuer.test/payment", "application/json",
					strings.NewReader(`{"mti":"0100"}`))
				if err == nil {
					resp.Body.Close()
					done <- fmt.Errorf("answered %d", resp.StatusCode)
					return
				}
				done <- nil
			}()
			synctest.Wait()
			sim.Close()
			if err := <-done; err != nil {
				t.Fatalf("%+v: %v after Close, want a dropped connection", r, err)
			}
		})
	}
}

// A connection refused is retried as a failure-cancel and reported as the
// original request's server error.
func TestIssuerUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String() + "/payment"
	ln.Close()
	// A refusal is immediate: a timeout long enough that load cannot turn
	// it into a timeout, which the gateway reports differently.
	client := NewIssuerClient(IssuerClientConfig{URL: url, ResponseTimeout: time.Minute, RetryAttempts: 2, RetryDelay: time.Millisecond}, nil)
	_, err = client.Authorize(context.Background(), testIssuerRequest)
	f, ok := err.(Failure)
	if !ok || f.Code != CodeIssuingServiceServerError || f.Message != IssuingServiceServerError("authorization", "-").Message {
		t.Fatalf("err %v", err)
	}
}
