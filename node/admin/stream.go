package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// stream serves GET /admin/v1/shards/{type}/stream: the shard map as
// server-sent events, one at once, then one whenever it changes, and a
// ": ping" comment every PingEvery. The changes come from the type's
// feed, one poller shared by every stream of the type. It ends when the
// client goes away. At most MaxStreams are open at once.
func (h *handler) stream(w http.ResponseWriter, r *http.Request) {
	select {
	case h.streams <- struct{}{}:
		defer func() { <-h.streams }()
	default:
		w.Header().Set("Retry-After", "5")
		h.log.Warn("admin: shard stream refused: too many open", "client", r.RemoteAddr, "max_streams", h.opts.MaxStreams)
		writeError(w, http.StatusServiceUnavailable, CodeTooManyStreams,
			fmt.Errorf("admin: %d shard streams are open, the most this node serves; retry later", h.opts.MaxStreams))
		return
	}
	typeName := r.PathValue("type")
	first, err := h.snapshot(r.Context(), typeName)
	if err != nil {
		h.fail(w, r, err) // an unknown type is a 404, not an empty stream
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		h.fail(w, r, errors.New("admin: the response cannot be streamed"))
		return
	}
	changes, unsubscribe := h.feeds.subscribe(typeName)
	defer unsubscribe()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	// A stream outlives the server's WriteTimeout: each write gets it
	// afresh, so only a client that stops reading is cut.
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(h.opts.WriteTimeout)) }
	extend()
	w.WriteHeader(http.StatusOK)
	if !send(w, flusher, first) {
		return
	}
	last := first
	ping := time.NewTicker(h.opts.PingEvery)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			extend()
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case next := <-changes:
			if bytes.Equal(next, last) {
				continue
			}
			last = next
			extend()
			if !send(w, flusher, next) {
				return
			}
		}
	}
}

// snapshot is the shard map of typeName, encoded.
func (h *handler) snapshot(ctx context.Context, typeName string) ([]byte, error) {
	st, err := h.readShards(ctx, typeName)
	if err != nil {
		return nil, err
	}
	return json.Marshal(st)
}

// send writes one "shards" event; false when the client is gone.
func send(w http.ResponseWriter, f http.Flusher, data []byte) bool {
	if _, err := fmt.Fprintf(w, "event: shards\ndata: %s\n\n", data); err != nil {
		return false
	}
	f.Flush()
	return true
}

// feeds runs one poller per entity type that has open streams: every
// PollEvery it reads the type's shard map once and hands a changed one to
// every stream of the type, however many are open.
type feeds struct {
	h      *handler
	mu     sync.Mutex
	byType map[string]*feed
}

// feed is one type's poller and its subscribers; each subscriber channel
// holds the newest map not yet taken (older ones are dropped: a stream
// only ever needs the latest).
type feed struct {
	subs map[chan []byte]struct{}
	stop context.CancelFunc
}

func newFeeds(h *handler) *feeds { return &feeds{h: h, byType: map[string]*feed{}} }

// subscribe returns the changes of typeName's map and the func that ends
// the subscription; the last subscriber gone stops the poller.
func (fs *feeds) subscribe(typeName string) (<-chan []byte, func()) {
	ch := make(chan []byte, 1)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	f, ok := fs.byType[typeName]
	if !ok {
		ctx, stop := context.WithCancel(context.Background())
		f = &feed{subs: map[chan []byte]struct{}{}, stop: stop}
		fs.byType[typeName] = f
		go fs.poll(ctx, typeName, f)
	}
	f.subs[ch] = struct{}{}
	return ch, func() {
		fs.mu.Lock()
		defer fs.mu.Unlock()
		delete(f.subs, ch)
		if len(f.subs) == 0 && fs.byType[typeName] == f {
			delete(fs.byType, typeName)
			f.stop()
		}
	}
}

// poll reads typeName's map every PollEvery until ctx ends, and publishes
// each one that differs from the last.
func (fs *feeds) poll(ctx context.Context, typeName string, f *feed) {
	t := time.NewTicker(fs.h.opts.PollEvery)
	defer t.Stop()
	var last []byte
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next, err := fs.h.snapshot(ctx, typeName)
		if err != nil {
			// A slow or failing read skips a beat; the streams keep the
			// last map until the next one.
			fs.h.log.Debug("admin: shard stream read failed", "entity_type", typeName, "err", err)
			continue
		}
		if bytes.Equal(next, last) {
			continue
		}
		last = next
		fs.mu.Lock()
		for ch := range f.subs {
			select {
			case <-ch: // drop the older map nobody took yet
			default:
			}
			ch <- next
		}
		fs.mu.Unlock()
	}
}
