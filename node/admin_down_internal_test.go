package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/cluster/lease"
	"github.com/shoal-dev/shoal/node/admin"
)

// downSource serves POST /admin/v1/down as adminSource does, over a view
// and a lease store; the handler needs nothing else of it here.
type downSource struct {
	admin.Source
	view  cluster.View
	store lease.Store
}

func (s downSource) Down(ctx context.Context, node cluster.UniqueAddress) error {
	return adminError(downKnown(ctx, s.view, s.store, node))
}

// POST /admin/v1/down of an incarnation that is neither a member nor holds
// a lease (a typo) answers a typed 404 and records nothing; a member, and a
// crashed incarnation that left the view but holds a lease, answer 202 and
// are downed.
func TestDownOfAnUnknownIncarnationIs404(t *testing.T) {
	ctx := context.Background()
	member := cluster.UniqueAddress{Node: "b", Incarnation: 5}
	crashed := cluster.UniqueAddress{Node: "c", Incarnation: 2} // left the view, lease still held
	view, err := cluster.NewView(cluster.Member{Address: member, Status: cluster.Up, JoinOrder: 1})
	if err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemoryStore(nil)
	for _, a := range []cluster.UniqueAddress{member, crashed} {
		if err := store.AcquireNode(ctx, a, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(admin.New(downSource{view: view, store: store},
		admin.Options{Token: "t", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	defer srv.Close()
	down := func(body string) (int, map[string]string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, "POST", srv.URL+"/admin/v1/down", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer t")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e map[string]string
		if resp.StatusCode >= 400 {
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, e
	}
	for _, body := range []string{`{"node":"b","incarnation":6}`, `{"node":"x","incarnation":5}`} {
		code, e := down(body)
		if code != http.StatusNotFound || e["code"] != string(admin.CodeUnknownNode) || e["error"] == "" {
			t.Fatalf("down %s: %d %v, want 404 unknown_node", body, code, e)
		}
	}
	if _, err := store.NodeLeaseExpired(ctx, cluster.UniqueAddress{Node: "b", Incarnation: 6}); !errors.Is(err, lease.ErrNoLease) {
		t.Fatalf("a refused down reached the store: %v", err)
	}
	if err := store.RenewNode(ctx, member, time.Minute); err != nil {
		t.Fatalf("the member's lease after a mistyped down: %v", err)
	}
	for _, a := range []cluster.UniqueAddress{member, crashed} {
		body, _ := json.Marshal(admin.DownRequest{Node: a.Node, Incarnation: &a.Incarnation})
		if code, e := down(string(body)); code != http.StatusAccepted {
			t.Fatalf("down %s: %d %v, want 202", a, code, e)
		}
		if err := store.RenewNode(ctx, a, time.Minute); !errors.Is(err, lease.ErrNodeDown) {
			t.Fatalf("%s after its down: renew = %v, want ErrNodeDown", a, err)
		}
	}
}
