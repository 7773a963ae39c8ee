package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"
)

// stream serves GET /admin/v1/shards/{type}/stream: the shard map as
// server-sent events, one at once, then one whenever it changes (looked
// for every PollEvery), and a ": ping" comment every PingEvery. It ends
// when the client goes away.
func (h *handler) stream(w http.ResponseWriter, r *http.Request) {
	typeName := r.PathValue("type")
	first, err := h.snapshot(r, typeName)
	if err != nil {
		h.fail(w, r, err) // an unknown type is a 404, not an empty stream
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		h.fail(w, r, errors.New("admin: the response cannot be streamed"))
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if !send(w, flusher, first) {
		return
	}
	last := first
	poll := time.NewTicker(h.opts.PollEvery)
	defer poll.Stop()
	ping := time.NewTicker(h.opts.PingEvery)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			if _, err := fmt.Fprint(w, ": ping\n\n"); err != nil {
				return
			}
			flusher.Flush()
		case <-poll.C:
			next, err := h.snapshot(r, typeName)
			if err != nil {
				// A slow or failing read skips a beat; the client keeps
				// the last map until the next one.
				h.log.Debug("admin: shard stream read failed", "entity_type", typeName, "err", err)
				continue
			}
			if bytes.Equal(next, last) {
				continue
			}
			last = next
			if !send(w, flusher, next) {
				return
			}
		}
	}
}

// snapshot is the shard map of typeName, encoded.
func (h *handler) snapshot(r *http.Request, typeName string) ([]byte, error) {
	st, err := h.readShards(r.Context(), typeName)
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
