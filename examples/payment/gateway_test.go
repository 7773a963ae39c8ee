package main

import (
	"context"
	"net"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// The gateway table of the spec (§10) against the simulator on a loopback
// listener. Timeouts are short so that hangs end quickly; nothing waits for
// time to pass except a request the simulator holds.

func startSimulator(t *testing.T) (*Simulator, string) {
	t.Helper()
	sim := NewSimulator()
	srv := httptest.NewServer(sim)
	t.Cleanup(func() {
		sim.Close()
		srv.Close()
	})
	return sim, srv.URL + "/payment"
}

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

func TestIssuerClient(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reverse bool
		rules   []Rule
		code    Code // "" for an answer
		errCode string
		mtis    []string
	}{
		{name: "approved", rules: nil, errCode: ErrCodeOK, mtis: []string{"0100"}},
		{name: "error code is an answer", rules: []Rule{{Reaction: Reaction{ErrCode: "TW005"}}}, errCode: "TW005", mtis: []string{"0100"}},
		{name: "400", rules: []Rule{{Reaction: Reaction{Status: 400}}}, code: CodeIssuingServiceBadRequest, mtis: []string{"0100"}},
		{name: "404 is a server error", rules: []Rule{{Reaction: Reaction{Status: 404}}}, code: CodeIssuingServiceServerError, mtis: []string{"0100"}},
		{name: "503 then failure-cancel answered", rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}},
			code: CodeIssuingServiceUnavailable, mtis: []string{"0100", "0120"}},
		{name: "reversal 500 then failure-cancel 0420", reverse: true, rules: []Rule{{MTI: "0400", Reaction: Reaction{Status: 500}}},
			code: CodeIssuingServiceUnavailable, mtis: []string{"0400", "0420"}},
		{name: "garbage body then failure-cancel", rules: []Rule{{MTI: "0100", Reaction: Reaction{Garbage: true}}},
			code: CodeIssuingServiceUnavailable, mtis: []string{"0100", "0120"}},
		{name: "failure-cancel 400", rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}, {Reaction: Reaction{Status: 400}}},
			code: CodeIssuingServiceBadRequest, mtis: []string{"0100", "0120"}},
		{name: "failure-cancel 5xx retried twice", rules: []Rule{{Reaction: Reaction{Status: 502}}},
			code: CodeIssuingServiceServerError, mtis: []string{"0100", "0120", "0120", "0120"}},
		{name: "failure-cancel 5xx, then answered on retry",
			rules: []Rule{{MTI: "0100", Reaction: Reaction{Status: 503}}, {MTI: "0120", Times: 1, Reaction: Reaction{Status: 500}}},
			code:  CodeIssuingServiceUnavailable, mtis: []string{"0100", "0120", "0120"}},
		{name: "failure-cancel timeout, then answered on retry",
			rules: []Rule{{MTI: "0100", Reaction: Reaction{Hang: true}}, {MTI: "0120", Times: 1, Reaction: Reaction{Hang: true}}},
			code:  CodeIssuingServiceUnavailable, mtis: []string{"0100", "0120", "0120"}},
		{name: "hang: timeouts all the way", rules: []Rule{{Reaction: Reaction{Hang: true}}},
			code: CodeTimeOut, mtis: []string{"0100", "0120", "0120", "0120"}},
		{name: "slow answer within the timeout", rules: []Rule{{Reaction: Reaction{Latency: 10 * time.Millisecond}}},
			errCode: ErrCodeOK, mtis: []string{"0100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim, url := startSimulator(t)
			sim.SetRules(tc.rules...)
			c := testIssuerClient(url)
			call := c.Authorize
			if tc.reverse {
				call = c.Reverse
			}
			resp, err := call(context.Background(), testIssuerRequest)
			if tc.code == "" {
				if err != nil || resp.ErrCode != tc.errCode {
					t.Fatalf("got %+v, %v; want code %s", resp, err, tc.errCode)
				}
			} else {
				f, ok := err.(Failure)
				if !ok || f.Code != tc.code {
					t.Fatalf("got %+v, %v; want %s", resp, err, tc.code)
				}
			}
			if got := mtis(sim.Received()); !slices.Equal(got, tc.mtis) {
				t.Fatalf("issuer received %v, want %v", got, tc.mtis)
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
	_, err = testIssuerClient(url).Authorize(context.Background(), testIssuerRequest)
	f, ok := err.(Failure)
	if !ok || f.Code != CodeIssuingServiceServerError || f.Message != IssuingServiceServerError("authorization", "-").Message {
		t.Fatalf("err %v", err)
	}
}
