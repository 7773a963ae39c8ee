// Command loadgen drives the payment example's API with the settle →
// settle → cancel → cancel mix of one order per cycle, from -c concurrent
// clients for -d, and prints throughput, status counts and latency
// percentiles per step; a request that got no response (refused, reset,
// cut) counts as status "error", and the report ends with their total.
// With -pid it also reports the server's CPU time per request (Linux, from
// /proc). -url may list several nodes of a cluster, comma-separated: the
// requests of an order go to them in turn, so that its settle and its
// cancel arrive through different nodes, and the statuses are counted per
// node too.
//
// Every acknowledged outcome is appended to -record as it happens, so that
// after the server crashes (kill -9) and restarts,
//
//	loadgen -verify -record FILE
//
// checks each of them through the API: an acknowledged settle must still be
// settled, an acknowledged cancel still canceled.
//
// See examples/payment/README.md.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

type config struct {
	urls                                     []string
	url, tenant, token, shop, record, prefix string
	concurrency                              int
	duration                                 time.Duration
	verify                                   bool
	pid                                      int
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.StringVar(&cfg.url, "url", "http://127.0.0.1:8080", "base URL of the payment API; several (comma-separated) are used in turn")
	fs.IntVar(&cfg.concurrency, "c", 16, "concurrent clients")
	fs.DurationVar(&cfg.duration, "d", 10*time.Second, "how long to run")
	fs.StringVar(&cfg.tenant, "tenant", "example", "X-Tenant-Id")
	fs.StringVar(&cfg.token, "token", "t", "bearer token")
	fs.StringVar(&cfg.shop, "shop", "shop-1", "walletShopId")
	fs.StringVar(&cfg.prefix, "prefix", strconv.FormatInt(time.Now().UnixNano()%1e9, 36), "order id prefix (alphanumeric), unique per run")
	fs.StringVar(&cfg.record, "record", "", "append acknowledged outcomes to this file (JSON lines); with -verify, read them")
	fs.BoolVar(&cfg.verify, "verify", false, "check every outcome in -record through the API instead of generating load")
	fs.IntVar(&cfg.pid, "pid", 0, "server process id: report its CPU time per request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for u := range strings.SplitSeq(cfg.url, ",") {
		if u = strings.TrimSuffix(strings.TrimSpace(u), "/"); u != "" {
			cfg.urls = append(cfg.urls, u)
		}
	}
	if len(cfg.urls) == 0 {
		return fmt.Errorf("-url %q: no URL", cfg.url)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: cfg.concurrency, MaxIdleConns: cfg.concurrency * len(cfg.urls)}}
	if cfg.verify {
		if cfg.record == "" {
			return errors.New("-verify needs -record")
		}
		return verify(ctx, client, cfg, out)
	}
	return load(ctx, client, cfg, out)
}

// outcome is one acknowledged result, as recorded.
type outcome struct {
	Order string `json:"order"`
	// State is "settled" or "canceled": what a 200 acknowledged.
	State string `json:"state"`
	// Later is true when a request that could change the state was sent
	// afterwards and not acknowledged (a cancel cut by the crash).
	Later bool `json:"later,omitempty"`
}

// steps of one cycle, in order; each is an endpoint and what a 200 means.
var steps = []struct{ name, endpoint, state string }{
	{"settle", "payment", "settled"},
	{"settle-again", "payment", "settled"},
	{"cancel", "cancel", "canceled"},
	{"cancel-again", "cancel", "canceled"},
}

type stats struct {
	mu        sync.Mutex
	latencies [][]time.Duration // per step
	statuses  map[string]int    // "step status"
	via       map[string]int    // "url status"
	failures  int               // requests without a response
	lastErr   string
}

// connErrorPause is how long a client waits after a request that got no
// response, so that a node that is gone is not hammered in a tight loop.
const connErrorPause = 50 * time.Millisecond

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// failed counts a request that got no response (connection refused,
// reset, closed): in the statuses as "error", per step and per URL.
func (s *stats) failed(name, base string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statuses[name+" error"]++
	s.via[base+" error"]++
	s.failures++
	s.lastErr = err.Error()
}

func load(ctx context.Context, client *http.Client, cfg config, out io.Writer) error {
	var rec *recorder
	if cfg.record != "" {
		f, err := os.OpenFile(cfg.record, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		rec = &recorder{w: f}
	}
	st := &stats{latencies: make([][]time.Duration, len(steps)), statuses: map[string]int{}, via: map[string]int{}}
	cpu0, err := cpuTime(cfg.pid)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	var requests atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for w := range cfg.concurrency {
		wg.Go(func() {
			for n := 0; ctx.Err() == nil; n++ {
				order := fmt.Sprintf("%sw%dn%d", cfg.prefix, w, n)
				var acked *outcome
				for i, s := range steps {
					t0 := time.Now()
					base := cfg.urls[(w+n+i)%len(cfg.urls)]
					status, err := put(ctx, client, cfg, base, order, s.endpoint)
					if err != nil {
						if acked != nil {
							acked.Later = true
						}
						if ctx.Err() == nil {
							// Not the end of the run: the request failed
							// (refused, reset, cut). Count it, and give a
							// server that is gone a moment before the next
							// order.
							st.failed(s.name, base, err)
							pause(ctx, connErrorPause)
						}
						break
					}
					requests.Add(1)
					st.add(i, s.name, base, status, time.Since(t0))
					if status == http.StatusOK {
						acked = &outcome{Order: order, State: s.state}
						rec.write(*acked)
					}
				}
				if acked != nil && acked.Later {
					rec.write(*acked)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu1, err := cpuTime(cfg.pid)
	if err != nil {
		return err
	}
	n := requests.Load()
	fmt.Fprintf(out, "%d requests in %v from %d clients: %.0f req/s\n", n, elapsed.Round(time.Millisecond), cfg.concurrency, float64(n)/elapsed.Seconds())
	if cfg.pid != 0 && n > 0 {
		fmt.Fprintf(out, "server CPU: %v, %.3f ms per request; resident memory now %s\n",
			cpu1-cpu0, float64(cpu1-cpu0)/float64(time.Millisecond)/float64(n), residentMemory(cfg.pid))
	}
	st.print(out)
	return nil
}

func (s *stats) add(step int, name, base string, status int, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latencies[step] = append(s.latencies[step], d)
	s.statuses[name+" "+strconv.Itoa(status)]++
	s.via[base+" "+strconv.Itoa(status)]++
}

func (s *stats) print(out io.Writer) {
	fmt.Fprintf(out, "%-13s %8s %9s %9s %9s %9s\n", "step", "count", "p50", "p90", "p99", "max")
	for i, step := range steps {
		l := slices.Clone(s.latencies[i])
		slices.Sort(l)
		if len(l) == 0 {
			continue
		}
		fmt.Fprintf(out, "%-13s %8d %9v %9v %9v %9v\n", step.name, len(l),
			percentile(l, 50), percentile(l, 90), percentile(l, 99), l[len(l)-1])
	}
	for _, k := range slices.Sorted(maps.Keys(s.statuses)) {
		fmt.Fprintf(out, "status %-20s %d\n", k, s.statuses[k])
	}
	if len(s.via) > 1 {
		for _, k := range slices.Sorted(maps.Keys(s.via)) {
			fmt.Fprintf(out, "via %s %d\n", k, s.via[k])
		}
	}
	fmt.Fprintf(out, "connection errors %d", s.failures)
	if s.failures > 0 {
		fmt.Fprintf(out, " (requests without a response; last: %s)", s.lastErr)
	}
	fmt.Fprintln(out)
}

// percentile of sorted l, nearest rank.
func percentile(l []time.Duration, p int) time.Duration {
	i := (len(l)*p + 99) / 100
	return l[max(0, min(len(l)-1, i-1))].Round(time.Microsecond)
}

func put(ctx context.Context, client *http.Client, cfg config, base, order, endpoint string) (int, error) {
	var body io.Reader
	if endpoint == "payment" {
		body = strings.NewReader(`{"amount":1000}`)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut,
		base+"/00/ec/settlements/"+cfg.shop+"/"+order+"/"+endpoint, body)
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Tenant-Id", cfg.tenant)
	req.Header.Set("Authorization", "Bearer "+cfg.token)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// recorder appends outcomes as JSON lines; a nil recorder records nothing.
type recorder struct {
	mu sync.Mutex
	w  io.Writer
}

func (r *recorder) write(o outcome) {
	if r == nil {
		return
	}
	line, _ := json.Marshal(o)
	r.mu.Lock()
	defer r.mu.Unlock()
	_, _ = r.w.Write(append(line, '\n'))
}

// verify reads the recorded outcomes (the last line per order wins) and
// checks each through the API with requests that change nothing: a settle
// of a settled payment and a cancel of a canceled one answer 200 again.
func verify(ctx context.Context, client *http.Client, cfg config, out io.Writer) error {
	f, err := os.Open(cfg.record)
	if err != nil {
		return err
	}
	defer f.Close()
	last := map[string]outcome{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var o outcome
		if err := json.Unmarshal(sc.Bytes(), &o); err != nil {
			return fmt.Errorf("%s: %w", cfg.record, err)
		}
		if _, ok := last[o.Order]; !ok {
			order = append(order, o.Order)
		}
		last[o.Order] = o
	}
	if err := sc.Err(); err != nil {
		return err
	}
	var bad []string
	for i, id := range order {
		o := last[id]
		endpoint := "payment"
		if o.State == "canceled" {
			endpoint = "cancel"
		}
		status, err := put(ctx, client, cfg, cfg.urls[i%len(cfg.urls)], id, endpoint)
		if err != nil {
			return err
		}
		// A settle whose later cancel was cut may have been canceled: its
		// settle then answers 400 CODE-003, which is no loss.
		if status != http.StatusOK && !(o.State == "settled" && o.Later && status == http.StatusBadRequest) {
			bad = append(bad, fmt.Sprintf("%s: acknowledged %s, now %s answers %d", id, o.State, endpoint, status))
		}
	}
	fmt.Fprintf(out, "verified %d acknowledged orders: %d lost\n", len(order), len(bad))
	for _, b := range bad {
		fmt.Fprintln(out, " ", b)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d acknowledged outcomes lost", len(bad))
	}
	return nil
}

// cpuTime is the user+system CPU time of process pid so far; 0 without a pid.
func cpuTime(pid int) (time.Duration, error) {
	if pid == 0 {
		return 0, nil
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("-pid: %w", err)
	}
	// Fields after the command name (which may hold spaces) in parentheses.
	s := string(data)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("-pid: unexpected /proc stat %q", s)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("-pid: %w", err)
	}
	const clockTicks = 100 // USER_HZ on Linux
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// residentMemory is the VmRSS line of process pid, or "?".
func residentMemory(pid int) string {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "?"
	}
	for line := range strings.Lines(string(data)) {
		if rss, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.Join(strings.Fields(rss), " ")
		}
	}
	return "?"
}
