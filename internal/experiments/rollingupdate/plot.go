package rollingupdate

import (
	"fmt"
	"image/color"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// minPlotted is the smallest latency drawn: the y axis is logarithmic, so
// a zero latency (a clock too coarse to see it) is drawn here instead.
const minPlotted = 0.01 // ms

// Points converts samples to plot points, seconds since the start against
// milliseconds of latency (at least minPlotted), split into answered and
// failed requests.
func Points(samples []Sample) (answered, failed plotter.XYs) {
	for _, s := range samples {
		p := plotter.XY{X: s.At.Seconds(), Y: max(float64(s.Latency)/float64(time.Millisecond), minPlotted)}
		if s.Failed {
			failed = append(failed, p)
		} else {
			answered = append(answered, p)
		}
	}
	return answered, failed
}

// WritePNG writes a plot of latency over time to path: every request a
// dot (failed ones red), every event a vertical line with its label.
func WritePNG(path, title string, samples []Sample, events []Event) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time since the load started (s)"
	p.Y.Label.Text = "latency (ms, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())

	answered, failed := Points(samples)
	top := minPlotted * 10
	for _, xy := range append(append(plotter.XYs{}, answered...), failed...) {
		top = max(top, xy.Y)
	}
	top *= 2 // room for the labels above the highest dot
	for _, set := range []struct {
		xys   plotter.XYs
		color color.Color
		name  string
	}{{answered, color.RGBA{B: 200, A: 255}, "answered"}, {failed, color.RGBA{R: 220, A: 255}, "failed"}} {
		if len(set.xys) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(set.xys)
		if err != nil {
			return fmt.Errorf("rollingupdate: plot %s: %w", set.name, err)
		}
		sc.GlyphStyle.Color = set.color
		sc.GlyphStyle.Radius = vg.Points(1)
		sc.GlyphStyle.Shape = draw.CircleGlyph{}
		p.Add(sc)
		p.Legend.Add(set.name, sc)
	}

	var labels plotter.XYLabels
	for i, e := range events {
		x := e.At.Seconds()
		ln, err := plotter.NewLine(plotter.XYs{{X: x, Y: minPlotted}, {X: x, Y: top}})
		if err != nil {
			return fmt.Errorf("rollingupdate: plot event %q: %w", e.Label, err)
		}
		ln.Color = color.RGBA{G: 140, A: 255}
		if e.Stop {
			ln.Color = color.RGBA{R: 200, G: 100, A: 255}
		}
		if e.Note {
			ln.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			ln.Color = color.Gray{Y: 120}
		}
		p.Add(ln)
		// Labels alternate between two heights so neighbours do not overlap.
		y := top / 1.3
		if i%2 == 1 {
			y = top / 3
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: y})
		labels.Labels = append(labels.Labels, e.Label)
	}
	if len(labels.XYs) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return fmt.Errorf("rollingupdate: plot labels: %w", err)
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Font.Size = vg.Points(7)
			l.TextStyle[i].Rotation = 0
		}
		p.Add(l)
	}
	p.Y.Min, p.Y.Max = minPlotted, top
	p.Legend.Top = true
	if err := p.Save(14*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("rollingupdate: write %s: %w", path, err)
	}
	return nil
}
