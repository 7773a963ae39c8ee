package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/examples/payment/readmodel"
)

// demoTimeouts keeps the original's proportions at a tenth of the time, so
// the demo's hanging issuer times out in seconds: the client gives up after
// 1.5s, the entity after 2s. The issuer client waits longer than both, so
// the entity's processing timeout is what ends the settlement; the call
// itself runs on in the background (issuing.go) until the demo is over.
// stretch multiplies every timeout, keeping the proportions, for machines
// too slow to settle a payment within 1.5s.
func demoTimeouts(stretch time.Duration) (Settings, IssuerClientConfig) {
	return Settings{
			AskTimeout:     stretch * 1500 * time.Millisecond,
			FailSafeMargin: stretch * 500 * time.Millisecond,
			ReceiveTimeout: stretch * 3 * time.Second,
		}, IssuerClientConfig{
			ResponseTimeout: stretch * 3 * time.Second,
			RetryAttempts:   2,
			RetryDelay:      100 * time.Millisecond,
		}
}

// demoStep is one request of the demo and the status it should get.
type demoStep struct {
	say    string
	before func(*Simulator)
	path   string // after /00/ec/settlements/
	body   string
	want   int
}

// runDemo drives node's API through a settlement's life and prints every
// request and response. It fails if a response has an unexpected status.
func runDemo(ctx context.Context, node *Node, settings Settings, out io.Writer) error {
	ask, processing := settings.AskTimeout, settings.AskTimeout+settings.FailSafeMargin
	// Order ids unique per run, so a demo against Postgres can be repeated.
	run := time.Now().UnixNano() % 1e9
	paid, hung := fmt.Sprintf("demo%dA", run), fmt.Sprintf("demo%dB", run)
	steps := []demoStep{
		{say: "settle an order", path: "shop-1/" + paid + "/payment", body: `{"amount":1000}`, want: 200},
		{say: "the same settle again: answered from the stored outcome, the issuer is not called",
			path: "shop-1/" + paid + "/payment", body: `{"amount":1000}`, want: 200},
		{say: "cancel it: a reversal at the issuer", path: "shop-1/" + paid + "/cancel", want: 200},
		{say: "cancel it again: already canceled, same customer", path: "shop-1/" + paid + "/cancel", want: 200},
		{say: fmt.Sprintf("the issuer now hangs; settle another order: the API gives up after %v (CODE-012)", ask),
			before: func(s *Simulator) { s.SetRules(Rule{Reaction: Reaction{Hang: true}}) },
			path:   "shop-1/" + hung + "/payment", body: `{"amount":2500}`, want: 500},
		{say: fmt.Sprintf("settle it again: stashed until the entity's processing timeout (%v) moves it to Failed, then the stored CODE-012", processing),
			path: "shop-1/" + hung + "/payment", body: `{"amount":2500}`, want: 500},
		{say: "cancel it: a failed settlement cannot be canceled (CODE-003)",
			before: func(s *Simulator) { s.SetRules() },
			path:   "shop-1/" + hung + "/cancel", want: 400},
	}
	client := &http.Client{Timeout: 30 * time.Second}
	for i, step := range steps {
		fmt.Fprintf(out, "\n%d. %s\n", i+1, step.say)
		if step.before != nil {
			step.before(node.Simulator)
		}
		status, err := demoRequest(ctx, client, node.APIURL+"/00/ec/settlements/"+step.path, step.body, out)
		if err != nil {
			return err
		}
		if status != step.want {
			return fmt.Errorf("demo step %d: status %d, want %d", i+1, status, step.want)
		}
	}
	fmt.Fprintf(out, "\n%d. the shop's settlements, from the read model (a projection of the journal's events, a moment behind)\n", len(steps)+1)
	if err := demoReadModel(ctx, client, node.APIURL, "/00/ec/settlements/shop-1", map[string]readmodel.State{paid: readmodel.Canceled, hung: readmodel.Failed}, out); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nthe issuer received %d requests\n", len(node.Simulator.Received()))
	return nil
}

// demoReadModel asks for the shop's settlements until the read model shows
// every order of want in its state (the projection follows the journal a
// moment behind), then prints the answer.
func demoReadModel(ctx context.Context, client *http.Client, base, path string, want map[string]readmodel.State, out io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	url := base + path
	fmt.Fprintf(out, "   → GET %s\n", path)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-Tenant-Id", string(TenantExample))
		req.Header.Set("Authorization", "Bearer demo-token")
		resp, err := client.Do(req)
		if err != nil {
			return fmt.Errorf("demo read model: %w", err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		var body shopBody
		if resp.StatusCode == http.StatusOK && json.Unmarshal(got, &body) == nil && shows(body, want) {
			fmt.Fprintf(out, "   ← %d %s\n", resp.StatusCode, bytes.TrimSpace(got))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo read model: %s never showed %v: last answer %d %s", url, want, resp.StatusCode, got)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// shows reports whether body lists every order of want in its state.
func shows(body shopBody, want map[string]readmodel.State) bool {
	found := 0
	for _, s := range body.Settlements {
		if st, ok := want[s.OrderID]; ok && readmodel.State(s.State) == st {
			found++
		}
	}
	return found == len(want)
}

func demoRequest(ctx context.Context, client *http.Client, url, body string, out io.Writer) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Tenant-Id", string(TenantExample))
	req.Header.Set("Authorization", "Bearer demo-token")
	req.Header.Set("Content-Type", "application/json")
	fmt.Fprintf(out, "   → PUT %s %s\n", req.URL.Path, body)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(out, "   ← %d %s (%v)\n", resp.StatusCode, bytes.TrimSpace(got), time.Since(start).Round(time.Millisecond))
	return resp.StatusCode, nil
}
