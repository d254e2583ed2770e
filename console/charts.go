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

// marks are vertical lines at steps (checkpoints, exports).
type marks struct {
	Name   string
	Steps  []float64
	Dashed bool
}

// chart is a rendered chart: inline SVG and the names of what it draws,
// in legend order.
type chart struct {
	Title  string
	SVG    template.HTML
	Series []string
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
	if len(ch.Series) == 0 {
		return nil, nil
	}
	for _, m := range ms {
		if len(m.Steps) == 0 {
			continue
		}
		v := &vlines{xs: m.Steps, color: palette[k%len(palette)], dashed: m.Dashed}
		k++
		p.Add(v)
		p.Legend.Add(m.Name, v)
		ch.Series = append(ch.Series, m.Name)
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

// vlines draws a vertical line across the plot at each x.
type vlines struct {
	xs     []float64
	color  color.Color
	dashed bool
}

func (v *vlines) style() draw.LineStyle {
	ls := draw.LineStyle{Color: v.color, Width: vg.Points(1)}
	if v.dashed {
		ls.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	}
	return ls
}

// Plot implements plot.Plotter.
func (v *vlines) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	ls := v.style()
	for _, x := range v.xs {
		px := trX(x)
		c.StrokeLine2(ls, px, c.Min.Y, px, c.Max.Y)
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
