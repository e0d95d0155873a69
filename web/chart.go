package web

import (
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units; the SVG scales with the page.
const (
	chartWidth  = 300
	chartHeight = 90
)

// chartColors are the line colours, in the order of a chart's lines (p50
// before p99). They are SVG presentation attributes, which the CSP allows,
// not inline styles.
var chartColors = []string{"#2f6fed", "#d9480f", "#2b8a3e", "#862e9c"}

func lineColor(i int) string { return chartColors[i%len(chartColors)] }

// chartMax is the largest value of any line of c.
func chartMax(c Chart) float64 {
	var m float64
	for _, l := range c.Lines {
		for _, v := range l.Values {
			m = max(m, v)
		}
	}
	return m
}

// chartMaxLabel is the top of the chart's scale with its unit.
func chartMaxLabel(c Chart) string {
	return strconv.FormatFloat(chartMax(c), 'g', 4, 64) + " " + c.Unit
}

// chartPoints is the points attribute of a polyline drawing values across
// the chart, top at top; an all-zero line lies on the axis.
func chartPoints(values []float64, top float64) string {
	var b strings.Builder
	n := len(values)
	for i, v := range values {
		x := 0.0
		if n > 1 {
			x = float64(i) * chartWidth / float64(n-1)
		}
		y := float64(chartHeight - 1)
		if top > 0 {
			y -= v / top * float64(chartHeight-2)
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatFloat(x, 'f', 1, 64))
		b.WriteByte(',')
		b.WriteString(strconv.FormatFloat(y, 'f', 1, 64))
	}
	return b.String()
}
