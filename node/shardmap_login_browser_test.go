package node_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/shoal-dev/shoal/cluster"
	"github.com/shoal-dev/shoal/internal/browsertest"
	"github.com/shoal-dev/shoal/node/admin"
)

// mapOnlySource is a node with one entity type whose map never changes:
// all the login page needs.
type mapOnlySource struct{}

func (mapOnlySource) Ready() error                                      { return nil }
func (mapOnlySource) Alive() error                                      { return nil }
func (mapOnlySource) Members() admin.Members                            { return admin.Members{Members: []admin.Member{}} }
func (mapOnlySource) Types() []string                                   { return []string{"Ops"} }
func (mapOnlySource) Leave(context.Context, string) error               { return nil }
func (mapOnlySource) Rebalance(context.Context, string, string) error   { return nil }
func (mapOnlySource) Down(context.Context, cluster.UniqueAddress) error { return nil }
func (mapOnlySource) Leases(context.Context) (admin.Leases, error)      { return admin.Leases{}, nil }
func (mapOnlySource) Shards(context.Context, string) (admin.Shards, error) {
	return admin.Shards{Type: "Ops", Nodes: []string{"node-1#1"},
		Shards: []admin.Shard{{ID: "0", Node: "node-1#1", State: admin.StateActive, Entities: 2}}}, nil
}

// With reads behind the token, the shard-map page asks for it, logs in
// (the session cookie), and then follows the live stream, which a browser
// opens without an Authorization header. A wrong token is shown, not kept.
func TestShardMapPageLogsInWhenReadsNeedTheToken(t *testing.T) {
	srv := httptest.NewServer(admin.New(mapOnlySource{}, admin.Options{
		Token: "page-token", ReadsNeedToken: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}))
	t.Cleanup(srv.Close)
	b := browsertest.Start(t)
	tab := b.Tab()
	browsertest.Load(t, tab, srv.URL+"/admin/map/")
	browsertest.WaitFor(t, tab, "the login form", `document.getElementById('connection').dataset.state === 'login' && document.getElementById('token') !== null`)

	browsertest.Eval[bool](t, tab, `(() => { document.getElementById('token').value = 'wrong'; document.getElementById('login').requestSubmit(); return true; })()`)
	browsertest.WaitFor(t, tab, "the refusal shown", `document.getElementById('login-error').textContent.includes('403')`)

	browsertest.Eval[bool](t, tab, `(() => { document.getElementById('token').value = 'page-token'; document.getElementById('login').requestSubmit(); return true; })()`)
	browsertest.WaitFor(t, tab, "the live map after the login", `document.getElementById('connection').dataset.state === 'live' &&
		document.querySelectorAll('#map .shard').length === 1 && document.getElementById('entity-total').textContent === '2'`)
	if cookie := browsertest.Eval[string](t, tab, `document.cookie`); cookie != "" {
		t.Fatalf("the session cookie is readable by the page's script: %q", cookie)
	}

	// The session ends (here: logged out) and the stream breaks: the page
	// asks for the token again instead of retrying for ever.
	browsertest.Eval[bool](t, tab, `(window.loggedOut = false, fetch('../v1/session', { method: 'DELETE' }).then(() => { window.loggedOut = true; }), true)`)
	browsertest.WaitFor(t, tab, "the logout done", `window.loggedOut === true`)
	srv.CloseClientConnections()
	browsertest.WaitFor(t, tab, "the login form again", `document.getElementById('connection').dataset.state === 'login' &&
		document.getElementById('login-error').textContent.includes('session ended')`)
}
