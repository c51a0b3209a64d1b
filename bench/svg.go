package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/farmem/farmem/farmem"
)

// Plot is a line plot: a few named series of (x, y) points over shared axes. WriteSVG draws
// it as a self-contained SVG document (no scripts, fonts or other files).
type Plot struct {
	Title, XLabel, YLabel string
	Series                []Series
	// XCategories, if set, names the x positions 0, 1, 2, ... (a sweep over a non-numeric
	// parameter such as requestdistribution).
	XCategories []string
	// LogX draws the x axis in log scale (base 2) with a tick at every x value, for sweeps
	// over client counts 1, 2, 4, ... All x values must then be positive.
	LogX bool
}

// Series is one line of a Plot; X and Y have the same length.
type Series struct {
	Name string
	X, Y []float64
}

// The plot's geometry, in SVG user units.
const (
	svgWidth, svgHeight                    = 760, 460
	plotLeft, plotRight, plotTop, plotBott = 84, 590, 48, 392
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"}

// WriteSVG writes the plot as an SVG document.
func (p *Plot) WriteSVG(out io.Writer) error {
	var xs, ys []float64
	for _, s := range p.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("bench: plot series %q has %d x and %d y values: %w", s.Name, len(s.X), len(s.Y), farmem.ErrInvalid)
		}
		for i := range s.X {
			if bad(s.X[i]) || bad(s.Y[i]) || (p.LogX && s.X[i] <= 0) {
				return fmt.Errorf("bench: plot series %q has a point (%v, %v) it cannot draw: %w", s.Name, s.X[i], s.Y[i], farmem.ErrInvalid)
			}
		}
		xs = append(xs, s.X...)
		ys = append(ys, s.Y...)
	}
	if len(xs) == 0 {
		return fmt.Errorf("bench: plot %q has no points: %w", p.Title, farmem.ErrInvalid)
	}

	// Y axis: from 0 (or the least value, if negative) to a nice maximum.
	ylo, yhi := min(0, slices.Min(ys)), slices.Max(ys)
	if yhi <= ylo {
		yhi = ylo + 1
	}
	ystep := niceStep((yhi - ylo) / 5)
	ylo = math.Floor(ylo/ystep) * ystep
	yhi = math.Ceil(yhi/ystep) * ystep
	yTicks := ticks(ylo, yhi, ystep)

	// X axis.
	var xTicks []float64
	var xLabel func(float64) string
	var xlo, xhi float64
	tr := func(x float64) float64 { return x }
	switch {
	case len(p.XCategories) > 0:
		xlo, xhi = -0.5, float64(len(p.XCategories))-0.5
		for i := range p.XCategories {
			xTicks = append(xTicks, float64(i))
		}
		xLabel = func(x float64) string {
			if i := int(x); i >= 0 && i < len(p.XCategories) {
				return p.XCategories[i]
			}
			return ""
		}
	case p.LogX:
		tr = math.Log2
		uniq := slices.Clone(xs)
		slices.Sort(uniq)
		xTicks = slices.Compact(uniq)
		xlo, xhi = math.Log2(xTicks[0]), math.Log2(xTicks[len(xTicks)-1])
		pad := max((xhi-xlo)*0.04, 0.25)
		xlo, xhi = xlo-pad, xhi+pad
		xLabel = fmtTick
	default:
		xlo, xhi = slices.Min(xs), slices.Max(xs)
		if xhi <= xlo {
			xlo, xhi = xlo-1, xhi+1
		}
		uniq := slices.Clone(xs)
		slices.Sort(uniq)
		if uniq = slices.Compact(uniq); len(uniq) <= 10 {
			// A few swept values: a tick at each, the points clear of the axes.
			xTicks = uniq
			pad := (xhi - xlo) * 0.04
			xlo, xhi = xlo-pad, xhi+pad
		} else {
			step := niceStep((xhi - xlo) / 6)
			xlo, xhi = math.Floor(xlo/step)*step, math.Ceil(xhi/step)*step
			xTicks = ticks(xlo, xhi, step)
		}
		xLabel = fmtTick
	}
	px := func(x float64) float64 {
		return plotLeft + (tr(x)-xlo)/(xhi-xlo)*(plotRight-plotLeft)
	}
	py := func(y float64) float64 {
		return plotBott - (y-ylo)/(yhi-ylo)*(plotBott-plotTop)
	}

	w := bufio.NewWriter(out)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	fmt.Fprintf(w, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgWidth, svgHeight)
	fmt.Fprintf(w, `<text x="%d" y="24" text-anchor="middle" font-size="15">%s</text>`+"\n",
		(plotLeft+plotRight)/2, esc(p.Title))
	// Grid and ticks.
	for _, y := range yTicks {
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", plotLeft, py(y), plotRight, py(y))
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
			plotLeft-6, py(y), esc(fmtTick(y)))
	}
	for _, x := range xTicks {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", px(x), plotBott, px(x), plotBott+5)
		fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px(x), plotBott+19, esc(xLabel(x)))
	}
	// Axes and their labels.
	fmt.Fprintf(w, `<path d="M%d %dV%dH%d" fill="none" stroke="#333"/>`+"\n", plotLeft, plotTop, plotBott, plotRight)
	fmt.Fprintf(w, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", (plotLeft+plotRight)/2, plotBott+44, esc(p.XLabel))
	fmt.Fprintf(w, `<text transform="translate(22 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n",
		(plotTop+plotBott)/2, esc(p.YLabel))
	// Series and legend.
	for i, s := range p.Series {
		color := palette[i%len(palette)]
		idx := make([]int, len(s.X))
		for j := range idx {
			idx[j] = j
		}
		slices.SortStableFunc(idx, func(a, b int) int {
			switch {
			case s.X[a] < s.X[b]:
				return -1
			case s.X[a] > s.X[b]:
				return 1
			}
			return 0
		})
		var pts []string
		for _, j := range idx {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(s.X[j]), py(s.Y[j])))
		}
		fmt.Fprintf(w, `<g class="series"><title>%s</title>`+"\n", esc(s.Name))
		if len(pts) > 1 {
			fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color)
		}
		for _, j := range idx {
			fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s</title></circle>`+"\n",
				px(s.X[j]), py(s.Y[j]), color, esc(xLabel(s.X[j])), esc(fmtTick(s.Y[j])))
		}
		fmt.Fprintf(w, "</g>\n")
		ly := plotTop + 10 + 20*i
		fmt.Fprintf(w, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", plotRight+16, ly, plotRight+40, ly, color)
		fmt.Fprintf(w, `<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", plotRight+46, ly, esc(s.Name))
	}
	fmt.Fprintf(w, "</svg>\n")
	return w.Flush()
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

// niceStep returns 1, 2 or 5 times a power of ten, at least raw.
func niceStep(raw float64) float64 {
	if raw <= 0 || bad(raw) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

func ticks(lo, hi, step float64) []float64 {
	var t []float64
	for i := 0; ; i++ {
		v := lo + float64(i)*step
		if v > hi+step*1e-6 || i > 100 {
			break
		}
		if math.Abs(v) < step*1e-9 {
			v = 0
		}
		t = append(t, v)
	}
	return t
}

// fmtTick formats an axis value compactly: 1.5M, 250k, 0.25.
func fmtTick(v float64) string { return fmtSI(v, 'g', 4, 1e4) }

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}
