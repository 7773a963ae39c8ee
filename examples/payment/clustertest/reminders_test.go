package clustertest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Durable reminders under faults (docs/DESIGN.md, "Durable reminders"): a
// payment whose issuer call never answers stays in processing until its
// processing timeout, which is a timer in the entity and a reminder stored
// with the event that entered the phase. Each scenario holds payments in
// processing, injects its fault while their reminders are due soon, and
// checks, from the journal, that every one of them left the phase exactly
// once (a reminder acknowledged twice would time a payment out twice), and
// that no reminder is left stored.

// processingBound is how long a held payment may take to leave its phase
// after the fault healed: its processing timeout (20 s after it was
// accepted), a lease expiry, a load of the firing, with room to spare.
const processingBound = 2 * time.Minute

// holdProcessing settles n orders of amount hangAmount through the nodes in
// turn, and waits until each is accepted in the journal: each waits for an
// issuer that never answers. The requests themselves end at the ask
// timeout; nobody waits for them.
func (c *Cluster) holdProcessing(ctx context.Context, n int) []string {
	c.t.Helper()
	run := fmt.Sprintf("h%d", time.Now().UnixNano()%1e9)
	var orders []string
	var wg sync.WaitGroup
	for i := range n {
		order := fmt.Sprintf("%sn%02d", run, i)
		orders = append(orders, order)
		node := c.Nodes[i%len(c.Nodes)]
		wg.Go(func() {
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPut,
				node.URL+"/00/ec/settlements/shop-1/"+order+"/payment", strings.NewReader(fmt.Sprintf(`{"amount":%d}`, hangAmount)))
			if err != nil {
				return
			}
			req.Header.Set("X-Tenant-Id", "example")
			req.Header.Set("Authorization", "Bearer clustertest")
			if resp, err := httpClient.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	c.t.Cleanup(wg.Wait)
	deadline := time.Now().Add(opBound)
	for {
		accepted := 0
		for _, o := range orders {
			if c.paymentEvents(ctx, o)["payment.SettlementAccepted"] == 1 {
				accepted++
			}
		}
		if accepted == n {
			return orders
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("clustertest: %d of %d held payments accepted within %v", accepted, n, opBound)
		}
		pause(ctx, 50*time.Millisecond)
	}
}

// paymentEvents counts the journal's events of order by manifest.
func (c *Cluster) paymentEvents(ctx context.Context, order string) map[string]int {
	c.t.Helper()
	rows, err := c.DB.Query(ctx, `SELECT manifest, count(*) FROM event_journal WHERE persistence_id LIKE $1 GROUP BY manifest`, "ec-house-money|%:"+order)
	if err != nil {
		c.t.Fatalf("clustertest: journal: %v", err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var m string
		var k int
		if err := rows.Scan(&m, &k); err != nil {
			c.t.Fatal(err)
		}
		out[m] = k
	}
	if err := rows.Err(); err != nil {
		c.t.Fatalf("clustertest: journal: %v", err)
	}
	return out
}

// hostedBy are the orders whose entity was last activated on node.
func (c *Cluster) hostedBy(ctx context.Context, node string, orders []string) []string {
	c.t.Helper()
	last := map[string]Interval{}
	for _, iv := range c.Activations(ctx).Intervals {
		if iv.Type != "ec-house-money" {
			continue
		}
		if prev, ok := last[iv.Entity]; !ok || iv.From.After(prev.From) {
			last[iv.Entity] = iv
		}
	}
	var out []string
	for _, o := range orders {
		for entity, iv := range last {
			if strings.HasSuffix(entity, ":"+o) && iv.On.Node == node {
				out = append(out, o)
			}
		}
	}
	return out
}

// leavingEvents are the events that end a settlement's processing.
var leavingEvents = []string{"payment.SettlementTimeoutDetected", "payment.SettlementAborted",
	"payment.SettlementSuccessConfirmed", "payment.SettlementFailureConfirmed"}

// waitPhasesLeft waits until every order left processing, and checks that
// each left it exactly once, that those in timedOut left it by their
// processing timeout, and that no payment reminder is left stored. It
// returns how many left by their timeout.
func (c *Cluster) waitPhasesLeft(ctx context.Context, orders, timedOut []string) int {
	c.t.Helper()
	deadline := time.Now().Add(processingBound)
	var pending []string
	for {
		pending = pending[:0]
		for _, o := range orders {
			evs := c.paymentEvents(ctx, o)
			left := 0
			for _, m := range leavingEvents {
				left += evs[m]
			}
			if left == 0 {
				pending = append(pending, o)
			}
		}
		if len(pending) == 0 {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("clustertest: %d of %d held payments still in processing %v after the fault: %v", len(pending), len(orders), processingBound, first(pending, 5))
		}
		pause(ctx, 200*time.Millisecond)
	}
	mustTimeOut := map[string]bool{}
	for _, o := range timedOut {
		mustTimeOut[o] = true
	}
	timeouts := 0
	for _, o := range orders {
		evs := c.paymentEvents(ctx, o)
		left := 0
		for _, m := range leavingEvents {
			left += evs[m]
		}
		if left != 1 || evs["payment.SettlementAccepted"] != 1 {
			c.t.Errorf("order %s: events %v; want it accepted once and leaving processing once", o, evs)
		}
		if evs["payment.SettlementTimeoutDetected"] == 1 {
			timeouts++
		} else if mustTimeOut[o] {
			c.t.Errorf("order %s: events %v; want its processing timeout (its node died while it waited)", o, evs)
		}
	}
	var stored int
	if err := c.DB.QueryRow(ctx, `SELECT count(*) FROM reminders WHERE entity_type = 'ec-house-money'`).Scan(&stored); err != nil {
		c.t.Fatalf("clustertest: reminders: %v", err)
	}
	if stored != 0 {
		c.t.Errorf("%d payment reminders still stored after every phase ended", stored)
	}
	return timeouts
}

// heldPayments is how many payments each scenario holds in processing.
const heldPayments = 12

// Kill -9 of the node holding payments in processing: their timers die
// with it; their reminders fire on the shards' next homes once its lease
// expired, with no request, and each payment times out exactly once.
func TestRemindersKill(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	victim := c.notCoordinator(ctx)
	orders := c.holdProcessing(ctx, heldPayments)
	victim.Kill(ctx)
	killed := time.Now()
	onVictim := c.hostedBy(ctx, victim.Name, orders)
	if len(onVictim) == 0 {
		t.Fatalf("none of %d held payments ran on %s", len(orders), victim.Name)
	}
	timeouts := c.waitPhasesLeft(ctx, orders, onVictim)
	t.Logf("%s killed holding %d of %d payments in processing; all left it once %v later (%d by their timeout)",
		victim.Name, len(onVictim), len(orders), time.Since(killed).Round(time.Millisecond), timeouts)
	c.Heal(ctx)
	c.CheckNoDualActivation(ctx)
}

// Postgres restarts while held payments' reminders fall due: the nodes
// that could not renew their leases fenced themselves and fire nothing;
// once the database is back and the nodes restarted, every payment leaves
// processing exactly once.
func TestRemindersPostgresRestart(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	orders := c.holdProcessing(ctx, heldPayments)
	c.RestartPostgres(ctx, 25*time.Second) // past the processing timeout
	c.Heal(ctx)
	healed := time.Now()
	timeouts := c.waitPhasesLeft(ctx, orders, nil)
	t.Logf("postgres restarted; %d held payments left processing once, %v after healing (%d by their timeout)", len(orders), time.Since(healed).Round(time.Millisecond), timeouts)
	c.CheckNoDualActivation(ctx)
}

// A full cluster restart while payments are in processing: every node is
// killed (a graceful stop would wait for the phases to end) and started
// again; no shard is placed until a message comes, yet the reminders
// place their shards and fire, once.
func TestRemindersFullClusterRestart(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	orders := c.holdProcessing(ctx, heldPayments)
	for _, n := range c.Nodes {
		n.Kill(ctx)
	}
	for _, n := range c.Nodes {
		n.Start(ctx)
	}
	c.WaitAllReady(ctx)
	restarted := time.Now()
	timeouts := c.waitPhasesLeft(ctx, orders, orders)
	t.Logf("full restart; %d held payments timed out once each, %v after the cluster was ready (%d timeouts)", len(orders), time.Since(restarted).Round(time.Millisecond), timeouts)
	c.CheckNoDualActivation(ctx)
}

// A node paused past its lease while its payments' reminders fall due:
// the next homes fire them; on unpause it fences itself before acting,
// so nothing times out twice.
func TestRemindersPausePastLease(t *testing.T) {
	extended(t)
	c := Start(t, Options{})
	ctx := scenarioContext(t)
	victim := c.notCoordinator(ctx)
	orders := c.holdProcessing(ctx, heldPayments)
	victim.Pause(ctx)
	onVictim := c.hostedBy(ctx, victim.Name, orders)
	if len(onVictim) == 0 {
		victim.Unpause(ctx)
		t.Fatalf("none of %d held payments ran on %s", len(orders), victim.Name)
	}
	c.waitNoShardsOn(ctx, victim.Name)
	c.waitPhasesLeft(ctx, orders, onVictim)
	victim.Unpause(ctx)
	if code := victim.WaitExit(ctx); code != 1 || !strings.Contains(victim.Logs(ctx), "node lease lost") {
		t.Errorf("%s exited %d after the unpause; want 1 after fencing itself (node lease lost)", victim.Name, code)
	}
	timeouts := c.waitPhasesLeft(ctx, orders, onVictim) // again: nothing more after the unpause
	t.Logf("%s paused holding %d of %d payments in processing; each left it once (%d by their timeout)", victim.Name, len(onVictim), len(orders), timeouts)
	c.Heal(ctx)
	c.CheckNoDualActivation(ctx)
}

// Clock skew between nodes: node1's clock is an hour behind, node2's an
// hour ahead. Reminders are due on the database's clock, and the firing
// tracks it, so the payments of a killed node time out on the skewed
// survivors neither early (a node an hour ahead firing at once) nor never
// (a node an hour behind waiting an hour).
func TestRemindersClockSkew(t *testing.T) {
	extended(t)
	c := Start(t, Options{ClockSkew: map[string]time.Duration{"node1": -time.Hour, "node2": time.Hour}})
	ctx := scenarioContext(t)
	victim := c.Nodes[2] // survivors: both skewed
	sent := time.Now()
	orders := c.holdProcessing(ctx, heldPayments)
	victim.Kill(ctx)
	onVictim := c.hostedBy(ctx, victim.Name, orders)
	if len(onVictim) == 0 {
		t.Fatalf("none of %d held payments ran on %s", len(orders), victim.Name)
	}
	deadline := time.Now().Add(processingBound)
	firstTimeout := time.Time{}
	for firstTimeout.IsZero() {
		for _, o := range onVictim {
			if c.paymentEvents(ctx, o)["payment.SettlementTimeoutDetected"] > 0 {
				firstTimeout = time.Now()
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no payment of %s timed out within %v on the skewed survivors", victim.Name, processingBound)
		}
		pause(ctx, 100*time.Millisecond)
	}
	// Due 20 s after each acceptance, which came after sent.
	if early := firstTimeout.Sub(sent); early < 20*time.Second {
		t.Errorf("a payment timed out %v after its request was sent; its processing timeout is 20 s", early)
	}
	timeouts := c.waitPhasesLeft(ctx, orders, onVictim)
	t.Logf("%s killed holding %d of %d payments; the first timed out %v after the requests (due after 20 s), on survivors skewed -1h and +1h; %d timeouts, each once",
		victim.Name, len(onVictim), len(orders), firstTimeout.Sub(sent).Round(time.Millisecond), timeouts)
}
