package console

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// series is one curve of a chart: y against the global step.
type series struct {
	Name   string
	Points plotter.XYs
}

// marks are vertical lines at steps (checkpoints, exports). They are
// drawn behind the curves, light, so that they never hide them: up to
// maxMarkLines as lines across the plot, more as short ticks on the x
// axis, thinned to at most maxAxisMarks, with a note that says how many
// there are and how far apart.
type marks struct {
	Name   string
	Steps  []float64
	Dashed bool
	// Total is how many marks Steps stand for (Steps may be thinned
	// already); 0: len(Steps).
	Total int64
	// Every is the mean distance in steps between marks (0: unknown).
	Every float64
}

// Bounds of the marks a chart draws.
const (
	maxMarkLines = 20 // marks drawn as lines across the plot
	maxAxisMarks = 40 // more: ticks on the x axis, at most this many
)

// checkpointColor is the colour of checkpoint marks: a grey apart from
// every curve's palette colour (opaque, as the marks lie under the
// curves).
var checkpointColor = color.RGBA{0x8C, 0x94, 0xA3, 0xFF}

// chart is a rendered chart: inline SVG and the names of what it draws,
// in legend order, with notes on what it left out.
type chart struct {
	Title  string
	SVG    template.HTML
	Series []string
	Notes  []string
}

// palette is Okabe and Ito's colour-blind safe palette.
var palette = []color.RGBA{
	{0, 114, 178, 255}, {213, 94, 0, 255}, {0, 158, 115, 255}, {204, 121, 167, 255},
	{230, 159, 0, 255}, {86, 180, 233, 255}, {240, 228, 66, 255}, {0, 0, 0, 255},
}

// renderChart draws the curves and marks against the global step as SVG
// with gonum/plot. Empty curves and marks are left out; a chart with no
// curve is nil.
func renderChart(title, ylabel string, curves []series, ms []marks) (*chart, error) {
	return renderChartX(title, "global step", ylabel, curves, ms)
}

// renderChartX is renderChart against another x than the global step.
func renderChartX(title, xlabel, ylabel string, curves []series, ms []marks) (*chart, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = false
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())
	ch := &chart{Title: title}
	k := 0
	for _, s := range curves {
		if len(s.Points) > 0 {
			k++
		}
	}
	if k == 0 {
		return nil, nil
	}
	// The marks first: every curve is drawn over them.
	type legendEntry struct {
		name  string
		thumb plot.Thumbnailer
	}
	var markLegend []legendEntry
	for _, m := range ms {
		if len(m.Steps) == 0 {
			continue
		}
		var c color.Color = checkpointColor
		if !m.Dashed {
			c = palette[k%len(palette)]
		}
		k++
		v := &vlines{xs: m.Steps, color: c, dashed: m.Dashed}
		if total := max(m.Total, int64(len(m.Steps))); total > maxMarkLines {
			v.xs, v.axis = thinSteps(m.Steps, maxAxisMarks), true
			ch.Notes = append(ch.Notes, markNote(m.Name, total, m.Every, len(v.xs)))
		}
		p.Add(v)
		markLegend = append(markLegend, legendEntry{m.Name, v})
	}
	k = 0
	for _, s := range curves {
		if len(s.Points) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(s.Points)
		if err != nil {
			return nil, fmt.Errorf("chart %s: %s: %w", title, s.Name, err)
		}
		c := palette[k%len(palette)]
		k++
		l.Color, l.Width = c, vg.Points(1.5)
		pts.Color, pts.Shape, pts.Radius = c, draw.CircleGlyph{}, vg.Points(1.5)
		p.Add(l)
		if len(s.Points) <= 60 { // a dense curve gets no glyphs: each would be a path of the SVG
			p.Add(pts)
		}
		p.Legend.Add(s.Name, l)
		ch.Series = append(ch.Series, s.Name)
	}
	for _, e := range markLegend {
		p.Legend.Add(e.name, e.thumb)
		ch.Series = append(ch.Series, e.name)
	}
	// Headroom above the curves for the legend, which sits top right.
	if span := p.Y.Max - p.Y.Min; span > 0 {
		p.Y.Max += span * 0.08 * float64(len(ch.Series))
	}
	cv := vgsvg.New(7*vg.Inch, 3.2*vg.Inch)
	p.Draw(draw.New(cv))
	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		return nil, err
	}
	svg := buf.Bytes()
	if i := bytes.Index(svg, []byte("<svg")); i >= 0 {
		svg = svg[i:] // inline: no XML declaration
	}
	// vgsvg escapes every text it draws; the rest is numbers and colours.
	ch.SVG = template.HTML(svg)
	return ch, nil
}

// thinSteps picks at most n of xs, spread evenly, the first and the last
// among them.
func thinSteps(xs []float64, n int) []float64 {
	if len(xs) <= n || n < 2 {
		return xs
	}
	out := make([]float64, n)
	for i := range n {
		out[i] = xs[i*(len(xs)-1)/(n-1)]
	}
	return out
}

// markNote says how many marks of name there are, how far apart, and how
// many the chart shows: "800 checkpoints, every 500 steps: 40 marked on
// the x axis".
func markNote(name string, total int64, every float64, shown int) string {
	s := fmt.Sprintf("%d %ss", total, name)
	switch {
	case every <= 0:
	case math.Abs(every-math.Round(every)) < 1e-6:
		s += fmt.Sprintf(", every %d steps", int64(math.Round(every)))
	default:
		s += fmt.Sprintf(", about every %d steps", int64(math.Round(every)))
	}
	return s + fmt.Sprintf(": %d marked on the x axis", shown)
}

// vlines draws a vertical line across the plot at each x, or with axis a
// short tick standing on the x axis line (in the axis' padding, below
// the data, so a curve along the bottom leaves it visible).
type vlines struct {
	xs     []float64
	color  color.Color
	dashed bool
	axis   bool
}

// axisTick is the height of a mark drawn on the axis.
var axisTick = vg.Points(9)

func (v *vlines) style() draw.LineStyle {
	ls := draw.LineStyle{Color: v.color, Width: vg.Points(0.75)}
	if v.dashed && !v.axis {
		ls.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	}
	return ls
}

// Plot implements plot.Plotter.
func (v *vlines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	ls := v.style()
	bottom, top := c.Min.Y, c.Max.Y
	if v.axis {
		bottom = c.Min.Y - p.X.Padding
		top = bottom + axisTick
	}
	for _, x := range v.xs {
		px := trX(x)
		c.StrokeLine2(ls, px, bottom, px, top)
	}
}

// DataRange implements plot.DataRanger: the steps widen the x axis only.
func (v *vlines) DataRange() (xmin, xmax, ymin, ymax float64) {
	xmin, xmax = math.Inf(1), math.Inf(-1)
	for _, x := range v.xs {
		xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
	}
	return xmin, xmax, math.Inf(1), math.Inf(-1)
}

// Thumbnail implements plot.Thumbnailer for the legend.
func (v *vlines) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(v.style(), x, c.Min.Y, x, c.Max.Y)
}
