package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A client that holds a request open (its body never ends) gets
// DrainTimeout of the shutdown budget, not all of it: the hand-off still
// completes, and Shutdown reports success.
func TestShutdownGivesSlowRequestsOnlyTheDrainTimeout(t *testing.T) {
	n := startNode(t, func(c *Config) {
		c.DrainTimeout = 100 * time.Millisecond
		c.ReadTimeout = time.Hour // only the drain ends the slow request
		c.Settings.AskTimeout = 100 * time.Millisecond
		c.Issuer.ResponseTimeout = time.Minute
	})
	// An entity still waiting for the issuer when the shutdown begins: far
	// beyond the ask's timeout, so the client has given up even on a loaded
	// machine.
	n.Simulator.SetRules(Rule{Reaction: Reaction{Latency: 3 * time.Second}})
	put(t, n, "example", "dummy", "shop-1/handoff/payment", amount1000).want(t, 500, CodeUnpredictable)

	slow := dialAPI(t, n)
	if _, err := io.WriteString(slow, "PUT /00/ec/settlements/shop-1/slow/payment HTTP/1.1\r\nHost: x\r\n"+
		"X-Tenant-Id: example\r\nAuthorization: Bearer dummy\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// 100 Continue: the handler is reading the body, the request is in flight.
	if line, err := bufio.NewReader(slow).ReadString('\n'); err != nil || !strings.Contains(line, "100") {
		t.Fatalf("want 100 Continue, got %q, %v", line, err)
	}
	if _, err := io.WriteString(slow, "{"); err != nil {
		t.Fatal(err)
	}
	// The budget is far longer than the drain; the request would hold it all.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	waitClosed(t, slow)
	key := OrderKey{Tenant: TenantExample, WalletShopID: "shop-1", OrderID: "handoff"}
	if got := storedEvents(t, n.Journal, key); !slices.Equal(got,
		[]string{"payment.SettlementAccepted", "payment.SettlementSuccessConfirmed"}) {
		t.Fatalf("after shutdown: %v", got)
	}
}

// testPatience bounds a wait that a working program ends much sooner; it
// only keeps a broken one from hanging the test.
const testPatience = time.Minute

// syncBuffer is a bytes.Buffer safe for the program's and the test's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls out until it matches re, for as long as the test may run.
func waitFor(t *testing.T, out *syncBuffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.After(testPatience)
	for {
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m
		}
		select {
		case <-deadline:
			t.Fatalf("no %q in output after %v:\n%s", re, testPatience, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The first interrupt starts a graceful shutdown, which waits for an entity
// whose issuer hangs; the second ends it at once, with errForced.
func TestSecondInterruptStopsAtOnce(t *testing.T) {
	received := make(chan struct{}, 1)
	release := make(chan struct{})
	issuer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case received <- struct{}{}:
		default:
		}
		<-release
	}))
	t.Cleanup(issuer.Close)
	t.Cleanup(func() { close(release) }) // runs first: the handlers end, then the server closes

	signals := make(chan os.Signal, 2)
	var out syncBuffer
	result := make(chan error, 1)
	go func() { result <- run(signals, []string{"-issuer-url", issuer.URL}, &out, io.Discard) }()
	url := waitFor(t, &out, regexp.MustCompile(`listening on (http://\S+)`))[1]

	go func() { // a settle that waits for the hanging issuer
		req, _ := http.NewRequest(http.MethodPut, url+"/00/ec/settlements/shop-1/hang/payment", strings.NewReader(amount1000))
		req.Header.Set("X-Tenant-Id", "example")
		req.Header.Set("Authorization", "Bearer t")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-received
	signals <- syscall.SIGINT
	waitFor(t, &out, regexp.MustCompile(`shutting down`))
	signals <- syscall.SIGINT
	select {
	case err := <-result:
		if !errors.Is(err, errForced) {
			t.Fatalf("run: %v, want errForced", err)
		}
	case <-time.After(testPatience):
		t.Fatalf("the second interrupt did not end the shutdown within %v", testPatience)
	}
	select {
	case <-release:
		t.Fatal("the issuer was released before run returned: the test proves nothing")
	default:
	}
}
