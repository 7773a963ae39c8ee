package main

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

func counterCall(t *testing.T, method, url string) (int, int64) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body counterBody
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
	}
	return resp.StatusCode, body.Value
}

// The counter answers each add with the value after it and reads the
// sum; the activation log names its activation and, at the end, its stop.
func TestCounterAndActivationLog(t *testing.T) {
	var log syncBuffer
	n := startNode(t, func(c *Config) { c.Counters, c.ActivationLog = true, &log })
	for i, by := range []string{"2", "3"} {
		status, v := counterCall(t, http.MethodPost, n.APIURL+"/counter/c1/add?by="+by)
		if want := []int64{2, 5}[i]; status != http.StatusOK || v != want {
			t.Fatalf("add %s: %d %d, want 200 %d", by, status, v, want)
		}
	}
	if status, v := counterCall(t, http.MethodGet, n.APIURL+"/counter/c1"); status != http.StatusOK || v != 5 {
		t.Fatalf("read: %d %d, want 200 5", status, v)
	}
	if status, _ := counterCall(t, http.MethodPost, n.APIURL+"/counter/c1/add?by=x"); status != http.StatusBadRequest {
		t.Fatalf("add by=x: %d, want 400", status)
	}
	if status, v := counterCall(t, http.MethodGet, n.APIURL+"/counter/c1"); status != http.StatusOK || v != 5 {
		t.Fatalf("read after a refused add: %d %d, want 200 5", status, v)
	}
	if err := n.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	var kinds []string
	sc := bufio.NewScanner(strings.NewReader(log.String()))
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), ActivationPrefix)
		if !ok {
			t.Fatalf("line without the prefix: %q", sc.Text())
		}
		var a Activation
		if err := json.Unmarshal([]byte(line), &a); err != nil {
			t.Fatal(err)
		}
		if a.Type != CounterKey.Name() || a.Entity != "c1" || a.Node != "local" || a.At.IsZero() {
			t.Fatalf("activation %+v", a)
		}
		kinds = append(kinds, a.Kind)
	}
	if strings.Join(kinds, ",") != Activated+","+Deactivated {
		t.Fatalf("activation log kinds %v, want activated then stopped", kinds)
	}
}
