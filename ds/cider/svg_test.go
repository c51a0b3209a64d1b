package cider_test

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// writeSVG draws one panel per structure and mix: throughput against clients, one line per
// synchronizer.
func writeSVG(path string, res map[sweepKey]pointResult, sts []structure, mixes []mix, syncs []syncKind, counts []int) error {
	const pw, ph, m = 420, 280, 50
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", pw*len(mixes), ph*len(sts)+20)
	colors := map[syncKind]string{optimistic: "#d62728", spin: "#7f7f7f", mcs: "#1f77b4", ciderAuto: "#2ca02c",
		ciderMixed: "#9467bd", ciderPess: "#ff7f0e"}
	maxX := float64(counts[len(counts)-1])
	for si, st := range sts {
		for mi, mx := range mixes {
			ox, oy := float64(mi*pw), float64(si*ph)
			maxY := 0.0
			for _, k := range syncs {
				for _, n := range counts {
					maxY = math.Max(maxY, res[sweepKey{st, mx.name, k, n}].tput/1e6)
				}
			}
			maxY = math.Ceil(maxY*1.1 + 0.01)
			lo := math.Log2(float64(counts[0]))
			x := func(n int) float64 { // clients on a log scale
				return ox + m + (math.Log2(float64(n))-lo)/(math.Log2(maxX)-lo)*(pw-m-20)
			}
			y := func(v float64) float64 { return oy + ph - m + 10 - v/maxY*(ph-m-20) }
			fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s, %s</text>`+"\n", ox+m, oy+18, st, mx.name)
			x0 := x(counts[0])
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, y(0), x(int(maxX)), y(0))
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x0, y(0), x0, y(maxY))
			for _, n := range counts {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d</text>`+"\n", x(n), y(0)+14, n)
			}
			for v := 0.0; v <= maxY; v += math.Max(1, math.Round(maxY/5)) {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", x0-4, y(v)+4, v)
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">clients (log scale)</text>`+"\n", (x0+x(int(maxX)))/2, y(0)+28)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" transform="rotate(-90 %.1f %.1f)" text-anchor="middle">Mops/s</text>`+"\n", ox+14, y(maxY/2), ox+14, y(maxY/2))
			for ki, k := range syncs {
				var pts []string
				for _, n := range counts {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(n), y(res[sweepKey{st, mx.name, k, n}].tput/1e6)))
				}
				c := colors[k]
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", ox+m+10, oy+34+float64(ki)*13, c, k)
			}
		}
	}
	fmt.Fprintf(&b, `<text x="10" y="%d">sim.ConnectX6, 8 memory nodes, 4 clients per compute node, zipf 0.99</text>`+"\n", ph*len(sts)+14)
	b.WriteString("</svg>\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
