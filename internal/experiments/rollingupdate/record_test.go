package rollingupdate

import (
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestPercentileIsNearestRank(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 100; i++ {
		lat = append(lat, time.Duration(i)*ms)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 50 * ms}, {0.99, 99 * ms}, {1, 100 * ms}, {0.001, 1 * ms}} {
		if got := Percentile(lat, c.p); got != c.want {
			t.Errorf("p%v of 1..100 ms = %v, want %v", c.p, got, c.want)
		}
	}
	// Few values: p99 of 3 is the largest, not an interpolation.
	if got := Percentile([]time.Duration{1 * ms, 2 * ms, 900 * ms}, 0.99); got != 900*ms {
		t.Errorf("p99 of three = %v, want 900ms", got)
	}
	if got := Percentile(nil, 0.99); got != 0 {
		t.Errorf("p99 of none = %v", got)
	}
}

// Stop windows run from a stop to the next action (a note ends none);
// the last runs to the end; requests are placed by their send time, and
// failed requests count with their latency.
func TestWindowsSplitAtActionsNotNotes(t *testing.T) {
	samples := []Sample{
		{At: 1 * time.Second, Latency: 2 * ms},
		{At: 9 * time.Second, Latency: 3 * ms},
		{At: 10 * time.Second, Latency: 7 * ms}, // first of "stop a"
		{At: 12 * time.Second, Latency: 500 * ms, Failed: true},
		{At: 19*time.Second + 999*time.Millisecond, Latency: 4 * ms},
		{At: 20 * time.Second, Latency: 900 * ms}, // "start b": no stop window
		{At: 30 * time.Second, Latency: 1 * ms},   // first of "stop b"
		{At: 35 * time.Second, Latency: 60 * ms},
		{At: 41 * time.Second, Latency: 80 * ms}, // after the end
	}
	events := []Event{
		{At: 10 * time.Second, Label: "stop a", Stop: true},
		{At: 11 * time.Second, Label: "a stopped", Note: true},
		{At: 20 * time.Second, Label: "start b"},
		{At: 30 * time.Second, Label: "stop b", Stop: true},
		{At: 31 * time.Second, Label: "b stopped", Note: true},
	}
	got := Windows(samples, events, 40*time.Second)
	want := []Stats{
		{Label: "before", From: 0, To: 10 * time.Second, Requests: 2, Max: 3 * ms, P99: 3 * ms, P50: 2 * ms},
		{Label: "stop a", From: 10 * time.Second, To: 20 * time.Second, Requests: 3, Failed: 1, Max: 500 * ms, P99: 500 * ms, P50: 7 * ms},
		{Label: "stop b", From: 30 * time.Second, To: 40 * time.Second, Requests: 2, Max: 60 * ms, P99: 60 * ms, P50: 1 * ms},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("windows:\n got %+v\nwant %+v", got, want)
	}
}

// WindowWhere keeps only the samples its filter accepts, within the window.
func TestWindowWhereFilters(t *testing.T) {
	samples := []Sample{
		{At: 1 * time.Second, Latency: 300 * ms, Entity: "moved"},
		{At: 2 * time.Second, Latency: 5 * ms, Entity: "stayed"},
		{At: 3 * time.Second, Latency: 7 * ms, Entity: "stayed"},
		{At: 9 * time.Second, Latency: 900 * ms, Entity: "moved"}, // outside
	}
	moved := func(s Sample) bool { return s.Entity == "moved" }
	got := WindowWhere("w", samples, 0, 5*time.Second, moved)
	if got.Requests != 1 || got.Max != 300*ms {
		t.Fatalf("moved: %+v", got)
	}
	got = WindowWhere("w", samples, 0, 5*time.Second, func(s Sample) bool { return !moved(s) })
	if got.Requests != 2 || got.Max != 7*ms || got.P50 != 5*ms {
		t.Fatalf("stayed: %+v", got)
	}
	if got := WindowWhere("w", samples, 0, 5*time.Second, nil); got.Requests != 3 {
		t.Fatalf("unfiltered: %+v", got)
	}
}

func TestRecorderSortsAndTimesFromStart(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := NewRecorder(t0)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			sent := t0.Add(time.Duration(49-i) * time.Second)
			r.Request("e", sent, sent.Add(time.Duration(i)*ms), i%10 == 0)
		})
	}
	wg.Wait()
	r.Event(t0.Add(3*time.Second), Event{Label: "late", Stop: true})
	r.Event(t0.Add(2*time.Second), Event{Label: "early"})
	samples, events := r.Results()
	if len(samples) != 50 {
		t.Fatalf("%d samples", len(samples))
	}
	for i, s := range samples {
		if s.At != time.Duration(i)*time.Second || s.Latency != time.Duration(49-i)*ms || s.Failed != ((49-i)%10 == 0) || s.Entity != "e" {
			t.Fatalf("sample %d = %+v", i, s)
		}
	}
	if len(events) != 2 || events[0].Label != "early" || events[0].At != 2*time.Second || !events[1].Stop {
		t.Fatalf("events %+v", events)
	}
}

// The plot's input: seconds against milliseconds, failures apart, and a
// zero latency lifted to the log axis' floor.
func TestPointsAndPNG(t *testing.T) {
	samples := []Sample{
		{At: 1500 * ms, Latency: 250 * time.Microsecond},
		{At: 2 * time.Second, Latency: 0},
		{At: 3 * time.Second, Latency: 3 * time.Second, Failed: true},
	}
	ok, failed := Points(samples)
	if len(ok) != 2 || ok[0].X != 1.5 || ok[0].Y != 0.25 || ok[1].Y != minPlotted {
		t.Fatalf("answered points %v", ok)
	}
	if len(failed) != 1 || failed[0].X != 3 || failed[0].Y != 3000 {
		t.Fatalf("failed points %v", failed)
	}
	path := filepath.Join(t.TempDir(), "p.png")
	if err := WritePNG(path, "test", samples, []Event{{At: 2 * time.Second, Label: "stop x", Stop: true}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 500 || b.Dy() < 200 {
		t.Fatalf("PNG of %v", b)
	}
}
