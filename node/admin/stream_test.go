package admin_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/node/admin"
)

// streamRecorder is a ResponseWriter whose flushed output arrives, chunk
// by chunk, on chunks: a client reading the stream.
type streamRecorder struct {
	header http.Header
	mu     sync.Mutex
	buf    strings.Builder
	code   int
	chunks chan string
}

func newStreamRecorder() *streamRecorder {
	return &streamRecorder{header: make(http.Header), chunks: make(chan string, 16)}
}

func (s *streamRecorder) Header() http.Header { return s.header }

func (s *streamRecorder) WriteHeader(code int) { s.code = code }

func (s *streamRecorder) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *streamRecorder) Flush() {
	s.mu.Lock()
	chunk := s.buf.String()
	s.buf.Reset()
	s.mu.Unlock()
	s.chunks <- chunk
}

// nothingSent fails when a chunk is waiting.
func (s *streamRecorder) nothingSent(t *testing.T, when string) {
	t.Helper()
	select {
	case c := <-s.chunks:
		t.Fatalf("%s: sent %q", when, c)
	default:
	}
}

func TestShardStreamSendsAtOnceThenOnChangeAndPings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake()
		h := admin.New(f, admin.Options{Logger: quiet(), PollEvery: 500 * time.Millisecond, PingEvery: 15 * time.Second})
		ctx, cancel := context.WithCancel(context.Background())
		req := httptest.NewRequest("GET", "/admin/v1/shards/payment/stream", nil).WithContext(ctx)
		rec := newStreamRecorder()
		done := make(chan struct{})
		start := time.Now()
		go func() {
			h.ServeHTTP(rec, req)
			close(done)
		}()

		first := <-rec.chunks
		if time.Since(start) != 0 {
			t.Fatalf("first event after %v, want at once", time.Since(start))
		}
		if rec.code != 200 || rec.header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("status %d, content type %q", rec.code, rec.header.Get("Content-Type"))
		}
		if !strings.HasPrefix(first, "event: shards\ndata: {\"type\":\"payment\"") || !strings.HasSuffix(first, "}\n\n") ||
			!strings.Contains(first, `"id":"2","node":"node-a#3","state":"active"`) {
			t.Fatalf("first event %q", first)
		}

		// Unchanged: polled, but nothing is sent.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		rec.nothingSent(t, "unchanged map")
		f.mu.Lock()
		polled := f.reads
		f.mu.Unlock()
		if polled < 4 {
			t.Fatalf("map read %d times in 2 s, want a poll every 500 ms", polled)
		}

		// A shard moves: the next poll sends the new map.
		f.setShards(func(s *admin.Shards) { s.Shards[0].Node, s.Shards[0].State = "node-b#1", admin.StateActive })
		time.Sleep(500 * time.Millisecond)
		synctest.Wait()
		select {
		case next := <-rec.chunks:
			if !strings.HasPrefix(next, "event: shards\ndata: ") || !strings.Contains(next, `"id":"2","node":"node-b#1"`) {
				t.Fatalf("event after the change %q", next)
			}
		default:
			t.Fatal("no event after the map changed")
		}
		rec.nothingSent(t, "after the change event")

		// Quiet for 15 s: a ping keeps the connection open.
		time.Sleep(15*time.Second - 2500*time.Millisecond)
		synctest.Wait()
		select {
		case c := <-rec.chunks:
			if c != ": ping\n\n" {
				t.Fatalf("at 15 s: %q, want a ping", c)
			}
		default:
			t.Fatal("no ping after 15 s")
		}

		// The client goes away: the handler returns.
		cancel()
		<-done
	})
}
