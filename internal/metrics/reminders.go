package metrics

import "github.com/prometheus/client_golang/prometheus"

// ReminderReport is what the firing of one entity type's reminders reports
// at scrape time: per shard it fires for, the reminders it holds that are
// due and those late; and its deliveries so far.
type ReminderReport struct {
	Type      string
	Held      int
	Delivered uint64
	Shards    map[string]ReminderShard
}

// ReminderShard counts one shard's reminders held in memory: Due is due
// and not yet acknowledged, Late due longer ago than the firer's lateness.
type ReminderShard struct{ Due, Late int }

// NewReminders registers the collectors of reminder firing on reg; report
// is called at each scrape. Nothing happens when reg is nil.
func NewReminders(reg prometheus.Registerer, report func() []ReminderReport) {
	if reg == nil {
		return
	}
	rc := &reminderCollector{
		report: report,
		due: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "reminders", "due"),
			"Reminders due and not yet acknowledged, per entity type and shard this node fires for.", []string{"type", "shard"}, nil),
		late: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "reminders", "late"),
			"Reminders due longer ago than the lateness threshold and not yet acknowledged, per entity type and shard.", []string{"type", "shard"}, nil),
		held: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "reminders", "held"),
			"Reminders held in memory (due within the window), per entity type.", []string{"type"}, nil),
		delivered: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "reminders", "delivered_total"),
			"Reminder deliveries sent (redeliveries included), per entity type.", []string{"type"}, nil),
	}
	registerScraped(reg, rc.Collect, rc.due, rc.late, rc.held, rc.delivered)
}

type reminderCollector struct {
	report                     func() []ReminderReport
	due, late, held, delivered *prometheus.Desc
}

func (c *reminderCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.report() {
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(r.Held), r.Type)
		ch <- prometheus.MustNewConstMetric(c.delivered, prometheus.CounterValue, float64(r.Delivered), r.Type)
		for shard, s := range r.Shards {
			ch <- prometheus.MustNewConstMetric(c.due, prometheus.GaugeValue, float64(s.Due), r.Type, shard)
			ch <- prometheus.MustNewConstMetric(c.late, prometheus.GaugeValue, float64(s.Late), r.Type, shard)
		}
	}
}
