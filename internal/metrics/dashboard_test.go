package metrics_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/shoal-dev/shoal/internal/metrics"
)

// The operations files (docs/operations) reference Shoal's series by name;
// these tests hold them to the collectors this package registers.
const (
	dashboardFile  = "../../docs/operations/grafana-dashboard.json"
	alertsFile     = "../../docs/operations/prometheus-alerts.yml"
	alertTestsFile = "../../docs/operations/prometheus-alerts.test.yml"
	opsReadme      = "../../docs/operations/README.md"
)

// targetLabels are the labels Prometheus adds to every scraped series.
var targetLabels = []string{"job", "instance"}

// seriesCatalog is every series name Shoal exports (histograms as their
// _bucket, _sum and _count series) with the label names each carries.
type seriesCatalog map[string][]string

// recordingRegisterer registers on reg and keeps the name of every
// descriptor registered, whether or not it has a series yet.
type recordingRegisterer struct {
	reg       *prometheus.Registry
	described map[string]bool
}

var descName = regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			r.described[m[1]] = true
		}
	}
	return r.reg.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *recordingRegisterer) Unregister(c prometheus.Collector) bool { return r.reg.Unregister(c) }

// registeredSeries builds every collector of this package as the runtime
// does (through WithNode), records one event of each kind so that every
// vector and scrape-time collector has a series, and gathers them. It
// fails when a described metric has no series: a collector added to the
// package must be exercised here too.
func registeredSeries(t *testing.T) seriesCatalog {
	t.Helper()
	rec := &recordingRegisterer{reg: prometheus.NewRegistry(), described: map[string]bool{}}
	reg := metrics.WithNode(rec, "n1")

	e := metrics.NewEntity(reg)
	for _, typ := range []string{"t", metrics.NoEntityType} {
		et := e.Type(typ)
		et.Delivered(et.Stripe(), 1)
		et.DeadLetter()
		et.Queued(1)
		et.Asked(time.Millisecond)
	}
	s := metrics.NewSharding(reg, func() []metrics.RegionReport {
		return []metrics.RegionReport{{Type: "t", Buffered: 1, Shards: map[string]int{"1": 2}}}
	})
	st := s.Type("t")
	st.Passivated()
	st.Restarted()
	st.BackedOff()
	st.HandedOff(time.Millisecond)
	st.Rebalanced(1)
	j := metrics.NewJournal(reg)
	j.Persisted(time.Millisecond)
	j.Replayed(time.Millisecond)
	j.Batch(1)
	for _, kind := range []string{"node", "coordinator"} {
		l := metrics.NewLease(reg, kind)
		l.RenewalTook(time.Millisecond)
		l.Renewed(time.Millisecond)
		l.Failed()
		l.Refused()
	}
	metrics.NewReminders(reg, func() []metrics.ReminderReport {
		return []metrics.ReminderReport{{Type: "t", Held: 1, Delivered: 1, Shards: map[string]metrics.ReminderShard{"1": {Due: 1, Late: 1}}}}
	})
	tr := metrics.NewTransport(reg, func() map[string]int { return map[string]int{"p": 1} })
	tr.Peer("p").Sent(1, 10)
	tr.Peer("p").Received(1, 10)
	p := metrics.NewProjection(reg, "proj", "0", func() metrics.ProjectionReport {
		return metrics.ProjectionReport{Running: true, LagSeconds: 1, LagEvents: 1, LagEventsCounted: true, LastEventUnix: 1}
	})
	p.Handled(1)
	p.Failed(metrics.ProjectionRetried)

	families, err := rec.reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	catalog := seriesCatalog{}
	gathered := map[string]bool{}
	for _, f := range families {
		gathered[f.GetName()] = true
		labels := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
		names := slices.Sorted(maps.Keys(labels))
		if f.GetType() == dto.MetricType_HISTOGRAM {
			catalog[f.GetName()+"_bucket"] = append(slices.Clone(names), "le")
			catalog[f.GetName()+"_sum"] = names
			catalog[f.GetName()+"_count"] = names
			continue
		}
		catalog[f.GetName()] = names
	}
	for name := range rec.described {
		if !gathered[name] {
			t.Errorf("%s is registered but has no series in this test: record an event of it in registeredSeries", name)
		}
	}
	if len(catalog) == 0 {
		t.Fatal("no series gathered")
	}
	return catalog
}

var (
	metricRef   = regexp.MustCompile(`shoal_[a-z_]+`)
	selectorRef = regexp.MustCompile(`(shoal_[a-z_]+)\{([^}]*)\}`)
	matcherName = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	groupingRef = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// problems lists what text references that c does not export: unknown
// series names, label matchers on labels a series does not carry, and
// grouping labels no series carries.
func (c seriesCatalog) problems(text string) []string {
	var out []string
	for _, name := range metricRef.FindAllString(text, -1) {
		if _, ok := c[name]; !ok {
			out = append(out, fmt.Sprintf("unknown metric %s", name))
		}
	}
	anyLabel := map[string]bool{"le": true, "exported_instance": true}
	for _, l := range targetLabels {
		anyLabel[l] = true
	}
	for _, labels := range c {
		for _, l := range labels {
			anyLabel[l] = true
		}
	}
	for _, m := range selectorRef.FindAllStringSubmatch(text, -1) {
		labels, ok := c[m[1]]
		if !ok {
			continue // reported above
		}
		for _, mm := range matcherName.FindAllStringSubmatch(m[2], -1) {
			if !c.hasLabel(labels, mm[1]) {
				out = append(out, fmt.Sprintf("%s has no label %s", m[1], mm[1]))
			}
		}
	}
	for _, m := range groupingRef.FindAllStringSubmatch(text, -1) {
		for l := range strings.SplitSeq(m[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !anyLabel[l] {
				out = append(out, fmt.Sprintf("no series has the label %s it groups by", l))
			}
		}
	}
	return out
}

// hasLabel says whether a series of labels carries l once scraped: its
// own labels, the target's, and exported_instance for its own "instance"
// (the projections'), which Prometheus renames so by default.
func (seriesCatalog) hasLabel(labels []string, l string) bool {
	switch {
	case slices.Contains(labels, l), slices.Contains(targetLabels, l):
		return true
	case l == "exported_instance":
		return slices.Contains(labels, "instance")
	}
	return false
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// dashboardExprs parses the dashboard and returns every query (targets'
// expr, templating queries) and all of its strings.
func dashboardExprs(t *testing.T) (exprs, all []string) {
	t.Helper()
	var dash any
	if err := json.Unmarshal([]byte(readFile(t, dashboardFile)), &dash); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, child := range v {
				walk(k, child)
			}
		case []any:
			for _, child := range v {
				walk(key, child)
			}
		case string:
			all = append(all, v)
			if key == "expr" || key == "query" || key == "definition" {
				exprs = append(exprs, v)
			}
		}
	}
	walk("", dash)
	return exprs, all
}

func TestCatalogCheckCatchesWrongReferences(t *testing.T) {
	c := seriesCatalog{"shoal_entity_mailbox_depth": {"node", "type"}}
	for _, text := range []string{
		`rate(shoal_entity_mailbox_dept[5m])`,
		`shoal_entity_mailbox_depth{peer="x"}`,
		`sum by (shard) (shoal_entity_mailbox_depth)`,
		`shoal_entity_mailbox_depth{exported_instance="0"}`,
	} {
		if len(c.problems(text)) == 0 {
			t.Errorf("%q: no problem found", text)
		}
	}
	if p := c.problems(`sum by (node, job) (shoal_entity_mailbox_depth{type="t",instance=~".+"})`); len(p) != 0 {
		t.Errorf("a valid query: %v", p)
	}
}

// The dashboard, the alert rules and their unit tests use only series and
// labels Shoal exports.
func TestOperationsFilesUseExportedSeries(t *testing.T) {
	catalog := registeredSeries(t)
	exprs, all := dashboardExprs(t)
	if len(exprs) == 0 {
		t.Fatalf("%s: no queries found", dashboardFile)
	}
	referenced := 0
	for _, s := range all {
		referenced += len(metricRef.FindAllString(s, -1))
		for _, p := range catalog.problems(s) {
			t.Errorf("%s: %s in %q", dashboardFile, p, s)
		}
	}
	if referenced == 0 {
		t.Errorf("%s references no shoal_ series", dashboardFile)
	}
	for _, path := range []string{alertsFile, alertTestsFile} {
		text := readFile(t, path)
		if len(metricRef.FindAllString(text, -1)) == 0 {
			t.Errorf("%s references no shoal_ series", path)
		}
		for _, p := range catalog.problems(text) {
			t.Errorf("%s: %s", path, p)
		}
	}
}

// Every alert has a for, a severity, a summary and a description, is
// documented in docs/operations/README.md and is fired by the promtool
// unit tests.
func TestAlertsAreDocumentedAndTested(t *testing.T) {
	rules := readFile(t, alertsFile)
	readme := readFile(t, opsReadme)
	tests := readFile(t, alertTestsFile)
	blocks := strings.Split(rules, "- alert: ")[1:]
	if len(blocks) == 0 {
		t.Fatalf("%s: no alerts", alertsFile)
	}
	for _, b := range blocks {
		name := strings.TrimSpace(strings.SplitN(b, "\n", 2)[0])
		for _, field := range []string{"expr", "for", "severity", "summary", "description"} {
			if !regexp.MustCompile(`\n\s+` + field + `: *\S`).MatchString(b) {
				t.Errorf("alert %s has no %s", name, field)
			}
		}
		if !strings.Contains(readme, "### "+name+"\n") {
			t.Errorf("alert %s has no section in %s", name, opsReadme)
		}
		if !regexp.MustCompile(`alertname: ` + regexp.QuoteMeta(name) + `\n\s+exp_alerts:`).MatchString(tests) {
			t.Errorf("alert %s is never expected to fire in %s", name, alertTestsFile)
		}
	}
}

// The dashboard's queries parse: promtool checks them as recording rules,
// with Grafana's variables replaced. make test installs promtool and sets
// SHOAL_REQUIRE_PROMTOOL; without either the test skips.
func TestDashboardQueriesParse(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("SHOAL_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("promtool not found (scripts/promtool.sh installs it): %v", err)
		}
		t.Skip("promtool not on PATH; scripts/promtool.sh installs it")
	}
	exprs, _ := dashboardExprs(t)
	vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$job", ".*", "$node", ".*")
	var b strings.Builder
	b.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, e := range exprs {
		if strings.HasPrefix(e, "label_values(") || e == "prometheus" {
			continue // Grafana's variable queries, not PromQL
		}
		n++
		q, _ := json.Marshal(vars.Replace(e)) // a JSON string is a YAML string
		fmt.Fprintf(&b, "      - record: dashboard:query%d\n        expr: %s\n", n, q)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", path).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules on the dashboard's %d queries: %v\n%s", n, err, out)
	}
}

// The dashboard shows every metric Shoal exports: a metric added to this
// package needs a panel.
func TestDashboardShowsEveryMetric(t *testing.T) {
	catalog := registeredSeries(t)
	_, all := dashboardExprs(t)
	shown := map[string]bool{}
	for _, s := range all {
		for _, name := range metricRef.FindAllString(s, -1) {
			shown[metricFamily(catalog, name)] = true
		}
	}
	for name := range catalog {
		if family := metricFamily(catalog, name); !shown[family] {
			t.Errorf("%s is not on the dashboard %s", family, dashboardFile)
			shown[family] = true // once per histogram
		}
	}
}

// metricFamily is the metric a series belongs to: a histogram's for its
// _bucket, _sum and _count series, name itself otherwise.
func metricFamily(c seriesCatalog, name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if _, histogram := c[base+"_bucket"]; histogram {
				return base
			}
		}
	}
	return name
}
