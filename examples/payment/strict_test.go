package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// send makes one request with the given headers and returns the answer,
// which must have a JSON body; redirects are not followed.
func send(t *testing.T, n *Node, method, path string, header http.Header, body string) apiResult {
	t.Helper()
	req, err := http.NewRequest(method, n.APIURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	res := apiResult{Status: resp.StatusCode, Header: resp.Header}
	if err := json.Unmarshal(data, &res.Body); err != nil || res.Body["code"] == "" && resp.StatusCode != 200 {
		t.Fatalf("%s %s: %d with body %q, want the {code, message} JSON body", method, path, resp.StatusCode, data)
	}
	return res
}

func apiHeaders(auth string) http.Header {
	return http.Header{"X-Tenant-Id": {"example"}, "Authorization": {auth}}
}

func TestAPIStrictBody(t *testing.T) {
	n := startNode(t, nil)
	for i, tc := range []struct {
		body   string
		status int
	}{
		{`{"amount":1000}xyz`, 400},
		{`{"amount":1000}{}`, 400},
		{`{"AMOUNT":1000}`, 400},
		{`{"Amount":1000}`, 400},
		{`{"amount":1000,"amount":5}`, 400},
		{`{"amount":5,"note":1,"note":2}`, 400},
		{`{"amount":null}`, 400},
		{`{"amount":1e3}`, 400},
		{`[1000]`, 400},
		{`{"amount":1000`, 400},
		{" {\"amount\":1000} \n", 200},
		{`{"note":"x","amount":1000}`, 200},
	} {
		path := "/00/ec/settlements/shop-1/strict" + string(rune('a'+i)) + "/payment"
		res := send(t, n, http.MethodPut, path, apiHeaders("Bearer dummy"), tc.body)
		if tc.status == 200 {
			res.want(t, 200, "")
		} else {
			res.want(t, 400, CodeValidation)
		}
	}
}

func TestAPIBearerSchemeIsCaseInsensitive(t *testing.T) {
	n := startNode(t, nil)
	for _, auth := range []string{"bearer dummy", "BEARER dummy", "Bearer dummy"} {
		send(t, n, http.MethodPut, "/00/ec/settlements/shop-1/auth/payment", apiHeaders(auth), amount1000).want(t, 200, "")
	}
	for _, auth := range []string{"Basic dummy", "Bearer ", "Bearerdummy", "bearer"} {
		send(t, n, http.MethodPut, "/00/ec/settlements/shop-1/auth/payment", apiHeaders(auth), amount1000).want(t, 401, CodeForbidden)
	}
}

func TestAPIRoutingErrorsHaveTheJSONBody(t *testing.T) {
	n := startNode(t, nil)
	h := apiHeaders("Bearer dummy")
	send(t, n, http.MethodPut, "/nope", h, "").want(t, 404, CodeNotFound)
	send(t, n, http.MethodPut, "/00/ec/settlements/shop-1/o1/refund", h, "").want(t, 404, CodeNotFound)
	res := send(t, n, http.MethodGet, "/00/ec/settlements/shop-1/o1/payment", h, "")
	res.want(t, 405, CodeValidation)
	if allow := res.Header.Get("Allow"); allow != http.MethodPut {
		t.Fatalf("Allow %q", allow)
	}
	send(t, n, http.MethodPost, "/00/ec/settlements/shop-1/o1/cancel", h, "").want(t, 405, CodeValidation)
	for _, p := range []string{"/00/ec/settlements/shop-1/x/../o1/payment", "/00/ec//settlements/shop-1/o1/payment", "/00/ec/settlements/shop-1/o1/payment/."} {
		res := send(t, n, http.MethodPut, p, h, amount1000)
		res.want(t, 404, CodeNotFound)
		if loc := res.Header.Get("Location"); loc != "" {
			t.Fatalf("%s redirected to %s", p, loc)
		}
	}
	big := apiHeaders("Bearer dummy")
	big.Set("X-Padding", strings.Repeat("p", MaxHeaderBytes))
	send(t, n, http.MethodPut, "/00/ec/settlements/shop-1/o1/payment", big, amount1000).want(t, 431, CodeValidation)
	if got := len(n.Simulator.Received()); got != 0 {
		t.Fatalf("refused requests reached the issuer %d times", got)
	}
}
