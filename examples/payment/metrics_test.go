package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// With Config.Metrics the API address serves /metrics, and a payment
// shows up in Shoal's metrics; without it /metrics is the API's 404.
func TestMetricsEndpoint(t *testing.T) {
	scrape := func(n *Node) (int, string) {
		t.Helper()
		resp, err := http.Get(n.APIURL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	n := startNode(t, func(c *Config) { c.Metrics = true })
	put(t, n, "example", "dummy", "shop-1/order1/payment", amount1000).want(t, 200, "")
	status, body := scrape(n)
	if status != http.StatusOK {
		t.Fatalf("/metrics answered %d", status)
	}
	for _, want := range []string{"shoal_entity_messages_delivered_total{", "shoal_entity_ask_duration_seconds_count{", "go_goroutines"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if status, _ := scrape(startNode(t, nil)); status == http.StatusOK {
		t.Error("/metrics served without Config.Metrics")
	}
}
