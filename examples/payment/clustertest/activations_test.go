package clustertest

import (
	"strings"
	"testing"
	"time"
)

// The analysis finds an entity active on two incarnations at once, whether
// the first stopped too late or never said so before its lease ran out,
// and accepts a clean move.
func TestAnalyzeActivations(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	line := func(kind, node string, inc uint64, s float64) string {
		return `ACTIVATION {"kind":"` + kind + `","type":"counter","entity":"c1","node":"` + node +
			`","inc":` + string(rune('0'+inc)) + `,"at":"` + at(s).Format(time.RFC3339Nano) + `"}`
	}
	a1, b1 := Incarnation{"a", 1}, Incarnation{"b", 1}
	for _, tc := range []struct {
		name      string
		log       []string
		leases    map[Incarnation]time.Time
		overlaps  int
		conflicts int
	}{
		{"handed off after its stop", []string{line("activated", "a", 1, 0), line("stopped", "a", 1, 5), line("activated", "b", 1, 6)},
			map[Incarnation]time.Time{a1: at(100), b1: at(100)}, 0, 0},
		{"moved after the killed node's lease expired", []string{line("activated", "a", 1, 0), line("activated", "b", 1, 11)},
			map[Incarnation]time.Time{a1: at(10), b1: at(100)}, 0, 0},
		{"moved before the killed node's lease expired", []string{line("activated", "a", 1, 0), line("activated", "b", 1, 9)},
			map[Incarnation]time.Time{a1: at(10), b1: at(100)}, 1, 0},
		{"started elsewhere before its stop", []string{line("activated", "a", 1, 0), line("activated", "b", 1, 4), line("stopped", "a", 1, 5)},
			map[Incarnation]time.Time{a1: at(100), b1: at(100)}, 1, 0},
		{"an incarnation without a lease never ends", []string{line("activated", "a", 1, 0), line("activated", "b", 1, 50)},
			map[Incarnation]time.Time{b1: at(100)}, 1, 0},
		{"passivated and restarted on one node", []string{line("activated", "a", 1, 0), line("stopped", "a", 1, 1), line("activated", "a", 1, 2)},
			map[Incarnation]time.Time{a1: at(100)}, 0, 0},
		{"a write conflict", []string{line("activated", "a", 1, 0), line("write-conflict", "a", 1, 1), line("stopped", "a", 1, 1)},
			map[Incarnation]time.Time{a1: at(100)}, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			acts, err := ParseActivations(strings.NewReader("some log line\n" + strings.Join(tc.log, "\n") + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			if len(acts) != len(tc.log) {
				t.Fatalf("parsed %d lines, want %d", len(acts), len(tc.log))
			}
			rep := Analyze(acts, tc.leases)
			if len(rep.Overlaps) != tc.overlaps || len(rep.Conflicts) != tc.conflicts {
				t.Fatalf("overlaps %v, conflicts %v; want %d and %d", rep.Overlaps, rep.Conflicts, tc.overlaps, tc.conflicts)
			}
		})
	}
	if _, err := ParseActivations(strings.NewReader("ACTIVATION {not json\n")); err == nil {
		t.Fatal("a broken activation line parsed")
	}
}
