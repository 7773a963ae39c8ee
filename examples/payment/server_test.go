package main

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Hostile clients: the API server closes connections that trickle their
// body or sit idle, so they cannot pile up. The timeouts are short here;
// the tests assert that the server closed the connection, and their own
// deadline (far longer) only keeps a broken server from hanging the test.

const serverGaveUp = 30 * time.Second

func dialAPI(t *testing.T, n *Node) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(n.APIURL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetReadDeadline(time.Now().Add(serverGaveUp)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// waitClosed reads until the server closes conn; responses before that are
// discarded. It fails if the connection is still open at the test's deadline.
func waitClosed(t *testing.T, conn net.Conn) {
	t.Helper()
	_, err := io.Copy(io.Discard, conn)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the server kept the connection open for %v", serverGaveUp)
	}
}

func TestAPIClosesASlowBody(t *testing.T) {
	n := startNode(t, func(c *Config) { c.ReadTimeout = 200 * time.Millisecond })
	conn := dialAPI(t, n)
	const body = `{"amount":1000}`
	if _, err := io.WriteString(conn, "PUT /00/ec/settlements/shop-1/slow/payment HTTP/1.1\r\nHost: x\r\n"+
		"X-Tenant-Id: example\r\nAuthorization: Bearer dummy\r\nContent-Length: 1000\r\n\r\n"+body[:1]); err != nil {
		t.Fatal(err)
	}
	// One more byte now and then, as a slow client sends them, until the
	// server stops listening. The body would take 100 s to arrive in full.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}
	}()
	waitClosed(t, conn)
	if got := len(n.Simulator.Received()); got != 0 {
		t.Fatalf("a request with a partial body reached the issuer (%d calls)", got)
	}
}

func TestAPIClosesIdleKeepAliveConnections(t *testing.T) {
	n := startNode(t, func(c *Config) { c.IdleTimeout = 200 * time.Millisecond })
	conn := dialAPI(t, n)
	if _, err := io.WriteString(conn, "PUT /00/ec/settlements/shop-1/idle/payment HTTP/1.1\r\nHost: x\r\n"+
		"X-Tenant-Id: example\r\nAuthorization: Bearer dummy\r\nContent-Length: 15\r\n\r\n{\"amount\":1000}"); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("first answer %d (close %v), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	// Now idle: the server must close it.
	_, err = io.Copy(io.Discard, r)
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatalf("the server kept an idle connection open for %v", serverGaveUp)
	}
}

func TestAPITimeoutDefaults(t *testing.T) {
	d := DefaultConfig()
	if d.ReadTimeout <= 0 || d.IdleTimeout <= 0 || d.WriteTimeout <= d.Settings.AskTimeout {
		t.Fatalf("defaults read %v write %v idle %v (ask %v): every timeout set, write above the ask timeout",
			d.ReadTimeout, d.WriteTimeout, d.IdleTimeout, d.Settings.AskTimeout)
	}
}

// Every other server the program starts (the issuer simulator, -pprof,
// -issuer-only) bounds every phase too.
func TestSimulatorServerHasTimeouts(t *testing.T) {
	n := startNode(t, nil)
	s := n.sim
	if s == nil || s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Fatalf("simulator server %+v: a timeout is missing", s)
	}
	if b := boundedServer(http.NotFoundHandler(), time.Minute); b.ReadHeaderTimeout <= 0 || b.ReadTimeout <= 0 || b.WriteTimeout != time.Minute || b.IdleTimeout <= 0 {
		t.Fatalf("boundedServer %+v", b)
	}
}
