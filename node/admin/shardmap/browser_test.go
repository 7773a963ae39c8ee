package shardmap_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/shoal-dev/shoal/internal/browsertest"
	"github.com/shoal-dev/shoal/node/admin/shardmap"
)

// The JSON of GET /admin/v1/shards/{type}, as the admin contract fixes it.
type shardMap struct {
	Type        string       `json:"type"`
	Coordinator *coordinator `json:"coordinator,omitempty"`
	Nodes       []string     `json:"nodes"`
	Shards      []shard      `json:"shards"`
}

type coordinator struct {
	Node        string `json:"node"`
	Incarnation uint64 `json:"incarnation"`
	Epoch       uint64 `json:"epoch"`
}

type shard struct {
	ID       string `json:"id"`
	Node     string `json:"node"`
	State    string `json:"state"`
	Entities int    `json:"entities"`
}

// fakeAdmin implements the two reads of the admin API the page uses:
// GET /admin/v1/types and GET /admin/v1/shards/{type}/stream. Tests change
// the maps and cut the streams.
type fakeAdmin struct {
	types []string

	mu      sync.Mutex
	maps    map[string][]byte // type → JSON of its current map
	changed chan struct{}     // closed (and replaced) when a map changes
	drop    chan struct{}     // closed (and replaced) to end every open stream
	refuse  bool              // answer new streams with 503
	streams []string          // the type of each stream request, in order
}

func newFakeAdmin(types []string, maps ...shardMap) *fakeAdmin {
	f := &fakeAdmin{types: types, maps: map[string][]byte{}, changed: make(chan struct{}), drop: make(chan struct{})}
	for _, m := range maps {
		f.publish(m)
	}
	return f
}

// serve starts a server with the fake API and the page at /admin/map/.
func (f *fakeAdmin) serve(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /admin/v1/types", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string][]string{"types": f.types})
	})
	mux.HandleFunc("GET /admin/v1/shards/{type}/stream", f.stream)
	mux.Handle("/admin/map/", http.StripPrefix("/admin/map", shardmap.Handler()))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(f.dropStreams) // before srv.Close, which waits for open streams
	return srv
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg, "code": code})
}

func (f *fakeAdmin) stream(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	f.mu.Lock()
	f.streams = append(f.streams, typ)
	body, known := f.maps[typ]
	refuse, changed, drop := f.refuse, f.changed, f.drop
	f.mu.Unlock()
	switch {
	case refuse:
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the test cut the streams")
		return
	case !known:
		writeError(w, http.StatusNotFound, "unknown_type", "no entity type "+typ)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher := w.(http.Flusher)
	send := func(b []byte) {
		fmt.Fprintf(w, "event: shards\ndata: %s\n\n", b)
		flusher.Flush()
	}
	send(body)
	for {
		select {
		case <-r.Context().Done():
			return
		case <-drop:
			return
		case <-changed:
			f.mu.Lock()
			next := f.maps[typ]
			changed = f.changed
			f.mu.Unlock()
			if string(next) != string(body) {
				body = next
				send(body)
			}
		}
	}
}

func (f *fakeAdmin) publish(m shardMap) {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.maps[m.Type] = b
	close(f.changed)
	f.changed = make(chan struct{})
}

// dropStreams ends every open stream.
func (f *fakeAdmin) dropStreams() {
	f.mu.Lock()
	defer f.mu.Unlock()
	close(f.drop)
	f.drop = make(chan struct{})
}

func (f *fakeAdmin) refuseStreams(refuse bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refuse = refuse
}

func (f *fakeAdmin) streamRequests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.streams)
}

// pageView is what the page shows, read from its DOM hooks by readPage. Its
// field order is the key order of readPage, so the JSON of the two compare.
type pageView struct {
	Type        string       `json:"type"`
	Connection  string       `json:"connection"`
	Stale       string       `json:"stale"`
	Coordinator string       `json:"coordinator"`
	Epoch       string       `json:"epoch"`
	Shards      string       `json:"shards"`
	Entities    string       `json:"entities"`
	Columns     []columnView `json:"columns"`
}

type columnView struct {
	Node        string     `json:"node"`
	Title       string     `json:"title"`
	Coordinator bool       `json:"coordinator"`
	Shards      string     `json:"shards"`
	Entities    string     `json:"entities"`
	Cells       []cellView `json:"cells"`
}

type cellView struct {
	Shard    string `json:"shard"`
	Node     string `json:"node"`
	State    string `json:"state"`
	Entities string `json:"entities"`
	Text     string `json:"text"` // what the cell shows: shard id and entity count
}

const readPage = `(() => {
  const text = (sel, root = document) => { const e = root.querySelector(sel); return e ? e.textContent : null; };
  const map = document.getElementById('map');
  return {
    type: map.dataset.type,
    connection: document.getElementById('connection').dataset.state,
    stale: map.dataset.stale,
    coordinator: document.getElementById('coordinator').dataset.node,
    epoch: document.getElementById('epoch').dataset.epoch,
    shards: text('#shard-total'),
    entities: text('#entity-total'),
    columns: [...map.querySelectorAll(':scope > section.node')].map((c) => ({
      node: c.dataset.node,
      title: text('h2', c),
      coordinator: c.querySelector('.badge') !== null,
      shards: text('[data-role=node-shards]', c),
      entities: text('[data-role=node-entities]', c),
      cells: [...c.querySelectorAll('.shard')].map((s) => ({
        shard: s.dataset.shard,
        node: s.dataset.node,
        state: s.dataset.state,
        entities: s.dataset.entities,
        text: text('.id', s) + ' ' + text('.n', s),
      })),
    })),
  };
})()`

// waitForView waits until the page shows want, and fails with what it shows
// instead when it does not within browsertest.Timeout.
func waitForView(t *testing.T, tab context.Context, what string, want pageView) {
	t.Helper()
	wantJSON, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	literal, _ := json.Marshal(string(wantJSON)) // a JSON string is a JavaScript string literal
	if err := browsertest.TryWaitFor(tab, fmt.Sprintf("JSON.stringify(%s) === %s", readPage, literal)); err != nil {
		got, _ := json.MarshalIndent(browsertest.Eval[pageView](t, tab, readPage), "", "  ")
		wantIndent, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("waiting for %s: %v\npage shows:\n%s\nwant:\n%s", what, err, got, wantIndent)
	}
}

// The maps of the test: three nodes, six shards of "payment"; shard 2 moves
// from node-a to node-b, through handing-off.
var (
	paymentCoordinator = &coordinator{Node: "node-a", Incarnation: 3, Epoch: 7}
	paymentNodes       = []string{"node-a#3", "node-b#1", "node-c#1"}

	paymentBefore = shardMap{Type: "payment", Coordinator: paymentCoordinator, Nodes: paymentNodes, Shards: []shard{
		{"0", "node-a#3", "active", 4},
		{"1", "node-b#1", "active", 2},
		{"2", "node-a#3", "active", 5},
		{"3", "node-c#1", "active", 0},
		{"4", "node-b#1", "active", 1},
		{"5", "", "unallocated", 0},
	}}
	paymentHandingOff = shardMap{Type: "payment", Coordinator: paymentCoordinator, Nodes: paymentNodes, Shards: []shard{
		{"0", "node-a#3", "active", 4},
		{"1", "node-b#1", "active", 2},
		{"2", "node-a#3", "handing-off", 5},
		{"3", "node-c#1", "active", 0},
		{"4", "node-b#1", "active", 1},
		{"5", "", "unallocated", 0},
	}}
	paymentAfter = shardMap{Type: "payment", Coordinator: paymentCoordinator, Nodes: paymentNodes, Shards: []shard{
		{"0", "node-a#3", "active", 4},
		{"1", "node-b#1", "active", 2},
		{"2", "node-b#1", "active", 1},
		{"3", "node-c#1", "active", 0},
		{"4", "node-b#1", "active", 1},
		{"5", "", "unallocated", 0},
	}}
	// Incarnations are uint64s: above 2^53 a JavaScript number would round them.
	orderMap = shardMap{Type: "order", Coordinator: &coordinator{Node: "node-b", Incarnation: 1795435303818723675, Epoch: 2},
		Nodes: []string{"node-a#3", "node-b#1795435303818723675"}, Shards: []shard{{"7", "node-a#3", "active", 3}}}
)

// The expected views, written out by hand: cells under their node's column,
// per-node and total counts, coordinator and epoch.
var (
	viewBefore = pageView{Type: "payment", Connection: "live", Stale: "false", Coordinator: "node-a#3", Epoch: "7",
		Shards: "6", Entities: "12", Columns: []columnView{
			{Node: "node-a#3", Title: "node-a#3", Coordinator: true, Shards: "2", Entities: "9", Cells: []cellView{
				{"0", "node-a#3", "active", "4", "0 4"},
				{"2", "node-a#3", "active", "5", "2 5"},
			}},
			{Node: "node-b#1", Title: "node-b#1", Shards: "2", Entities: "3", Cells: []cellView{
				{"1", "node-b#1", "active", "2", "1 2"},
				{"4", "node-b#1", "active", "1", "4 1"},
			}},
			{Node: "node-c#1", Title: "node-c#1", Shards: "1", Entities: "0", Cells: []cellView{
				{"3", "node-c#1", "active", "0", "3 0"},
			}},
			{Node: "", Title: "Unallocated", Shards: "1", Entities: "0", Cells: []cellView{
				{"5", "", "unallocated", "0", "5 0"},
			}},
		}}
	viewHandingOff = pageView{Type: "payment", Connection: "live", Stale: "false", Coordinator: "node-a#3", Epoch: "7",
		Shards: "6", Entities: "12", Columns: []columnView{
			{Node: "node-a#3", Title: "node-a#3", Coordinator: true, Shards: "2", Entities: "9", Cells: []cellView{
				{"0", "node-a#3", "active", "4", "0 4"},
				{"2", "node-a#3", "handing-off", "5", "2 5"},
			}},
			viewBefore.Columns[1], viewBefore.Columns[2], viewBefore.Columns[3],
		}}
	viewAfter = pageView{Type: "payment", Connection: "live", Stale: "false", Coordinator: "node-a#3", Epoch: "7",
		Shards: "6", Entities: "8", Columns: []columnView{
			{Node: "node-a#3", Title: "node-a#3", Coordinator: true, Shards: "1", Entities: "4", Cells: []cellView{
				{"0", "node-a#3", "active", "4", "0 4"},
			}},
			{Node: "node-b#1", Title: "node-b#1", Shards: "3", Entities: "4", Cells: []cellView{
				{"1", "node-b#1", "active", "2", "1 2"},
				{"2", "node-b#1", "active", "1", "2 1"},
				{"4", "node-b#1", "active", "1", "4 1"},
			}},
			viewBefore.Columns[2], viewBefore.Columns[3],
		}}
	viewOrder = pageView{Type: "order", Connection: "live", Stale: "false", Coordinator: "node-b#1795435303818723675", Epoch: "2",
		Shards: "1", Entities: "3", Columns: []columnView{
			{Node: "node-a#3", Title: "node-a#3", Shards: "1", Entities: "3", Cells: []cellView{
				{"7", "node-a#3", "active", "3", "7 3"},
			}},
			{Node: "node-b#1795435303818723675", Title: "node-b#1795435303818723675", Coordinator: true, Shards: "0", Entities: "0", Cells: []cellView{}},
		}}
)

func TestBrowserMapFollowsAShardMove(t *testing.T) {
	fake := newFakeAdmin([]string{"payment", "order"}, paymentBefore, orderMap)
	srv := fake.serve(t)
	b := browsertest.Start(t)
	tab := b.Tab()

	browsertest.Load(t, tab, srv.URL+"/admin/map/")
	waitForView(t, tab, "the first map of the first type", viewBefore)
	if got := fake.streamRequests(); !slices.Equal(got, []string{"payment"}) {
		t.Fatalf("stream requests %v, want one for the first type, payment", got)
	}

	fake.publish(paymentHandingOff)
	waitForView(t, tab, "shard 2 handing off on node-a", viewHandingOff)
	fake.publish(paymentAfter)
	waitForView(t, tab, "shard 2 active on node-b", viewAfter)
	browsertest.WaitFor(t, tab, "the moved cell to be marked as changed",
		`document.querySelector('[data-shard="2"]').classList.contains('changed') &&
		 !document.querySelector('[data-shard="0"]').classList.contains('changed')`)
	browsertest.Screenshot(t, tab, "shardmap-live.png")

	if got := fake.streamRequests(); !slices.Equal(got, []string{"payment"}) {
		t.Fatalf("stream requests %v, want the one stream to carry every update", got)
	}
}

func TestBrowserMapChoosesTheType(t *testing.T) {
	fake := newFakeAdmin([]string{"payment", "order"}, paymentBefore, orderMap)
	srv := fake.serve(t)
	b := browsertest.Start(t)

	// ?type= picks the type.
	tab := b.NewTab(t)
	browsertest.Load(t, tab, srv.URL+"/admin/map/?type=order")
	waitForView(t, tab, "the order map chosen by ?type=", viewOrder)
	if got := fake.streamRequests(); !slices.Equal(got, []string{"order"}) {
		t.Fatalf("stream requests %v, want one for order", got)
	}
	options := browsertest.Eval[[]string](t, tab, `[...document.querySelectorAll('#type option')].map((o) => o.value)`)
	if !slices.Equal(options, []string{"payment", "order"}) {
		t.Fatalf("type choices %v, want [payment order]", options)
	}

	// Choosing another type in the page follows its stream and keeps the
	// choice in the address.
	browsertest.Eval[bool](t, tab, `(() => { const s = document.getElementById('type');
		s.value = 'payment'; return s.dispatchEvent(new Event('change')); })()`)
	waitForView(t, tab, "the payment map after choosing it", viewBefore)
	if got := browsertest.Eval[string](t, tab, `location.search`); got != "?type=payment" {
		t.Fatalf("address query %q after choosing payment, want ?type=payment", got)
	}
	if got := fake.streamRequests(); !slices.Equal(got, []string{"order", "payment"}) {
		t.Fatalf("stream requests %v, want order then payment", got)
	}
}

func TestBrowserMapShowsDisconnectedAndReconnects(t *testing.T) {
	fake := newFakeAdmin([]string{"payment"}, paymentBefore)
	srv := fake.serve(t)
	b := browsertest.Start(t)
	tab := b.Tab()

	browsertest.Load(t, tab, srv.URL+"/admin/map/")
	waitForView(t, tab, "the first map", viewBefore)

	// The backend ends the stream and refuses new ones: the page says so and
	// keeps the last map, dimmed.
	fake.refuseStreams(true)
	fake.dropStreams()
	disconnected := viewBefore
	disconnected.Connection, disconnected.Stale = "disconnected", "true"
	waitForView(t, tab, "the disconnected state with the last map kept", disconnected)
	if got := browsertest.Eval[string](t, tab, `document.getElementById('connection').textContent`); !strings.Contains(got, "Disconnected") || !strings.Contains(got, "Retrying") {
		t.Fatalf("status text %q, want it to say disconnected and retrying", got)
	}
	browsertest.Screenshot(t, tab, "shardmap-disconnected.png")

	// The backend comes back with a changed map: the page reconnects by itself.
	fake.publish(paymentAfter)
	fake.refuseStreams(false)
	waitForView(t, tab, "the reconnected page with the new map", viewAfter)
	if got := fake.streamRequests(); len(got) < 2 {
		t.Fatalf("stream requests %v, want a reconnect after the first", got)
	}
}
