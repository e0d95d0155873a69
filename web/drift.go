package web

import (
	"strconv"
)

// DriftProps fills an endpoint's drift page.
type DriftProps struct {
	Layout
	Endpoint string
	// Unavailable, when set, is shown instead of the report: there is no
	// sample store, or reading it failed.
	Unavailable string
	// Error is a bad query parameter's message; the form is shown again.
	Error string
	// The form: version, windows and the feature whose histogram is shown.
	Version, Reference, Current, Feature string
	Versions                             []string
	// SamplingOff says the endpoint records no samples (sampling rate 0).
	SamplingOff bool
	Report      *DriftReport
	// Timeline has one chart per live version over the last day of
	// scheduled checks.
	Timeline []Chart
	Alerts   []DriftAlertRow
}

// DriftReport is the report part of the page.
type DriftReport struct {
	ReferenceLabel, CurrentLabel     string
	ReferenceSamples, CurrentSamples uint64
	MinSamples                       int
	Verdict                          string
	// Missing, when set, says what the report lacks to be computed ("the
	// reference holds 42 of 200 samples"); no score is shown then.
	Missing          string
	Output           DriftScore
	OutputHistogram  DriftHistogram
	Features         []DriftScore
	FeatureHistogram *DriftHistogram
}

// DriftScore is one number with its threshold; Link, for a feature, shows
// its histogram.
type DriftScore struct {
	Name      string
	Link      string
	Value     float64
	Threshold float64
	Flagged   bool
}

// DriftHistogram is a reference and a current histogram over the same
// bins, as shares of their windows.
type DriftHistogram struct {
	Title     string
	Labels    []string
	Reference []float64
	Current   []float64
}

// DriftAlertRow is an open alert.
type DriftAlertRow struct {
	Version, Metric, Value, Since, State string
}

// SVG geometry of the drift charts.
const (
	histWidth  = 300
	histHeight = 120
	barRow     = 16
	barLabel   = 110
	barWidth   = 300
)

// histBar is one rectangle of an overlaid histogram.
type histBar struct {
	X, Y, W, H string
	Series     string // "reference" or "current"
	Title      string
}

func f1(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }

// histBars lays out h: per bin a reference bar and a current bar side by
// side, heights relative to the largest share.
func histBars(h DriftHistogram) []histBar {
	n := len(h.Reference)
	if n == 0 {
		return nil
	}
	top := 0.0
	for i := range n {
		top = max(top, h.Reference[i], at(h.Current, i))
	}
	if top == 0 {
		top = 1
	}
	slot := float64(histWidth) / float64(n)
	w := slot * 0.4
	var out []histBar
	for i := range n {
		label := ""
		if i < len(h.Labels) {
			label = h.Labels[i]
		}
		for j, v := range []float64{h.Reference[i], at(h.Current, i)} {
			ht := v / top * float64(histHeight-2)
			series := "reference"
			if j == 1 {
				series = "current"
			}
			out = append(out, histBar{X: f1(float64(i)*slot + slot*0.1 + float64(j)*w), Y: f1(float64(histHeight-1) - ht),
				W: f1(w), H: f1(ht), Series: series, Title: series + " " + label + ": " + strconv.FormatFloat(v*100, 'f', 1, 64) + "%"})
		}
	}
	return out
}

// histLabel is one bin's label under its bars: a class, or a bin's upper
// edge ("≤ 0.12").
type histLabel struct {
	X, Y, Transform, Text, Full string
}

// histLabels places h's labels under their bins, slanted so that twenty
// class names fit beside each other, each cut to 12 characters (the
// whole label is the element's title). They end at their bin and run
// down to the left, into the 45 px the chart's view box keeps left of
// its bars.
func histLabels(h DriftHistogram) []histLabel {
	n := len(h.Reference)
	if n == 0 {
		return nil
	}
	slot := float64(histWidth) / float64(n)
	var out []histLabel
	for i, l := range h.Labels[:min(n, len(h.Labels))] {
		x, y := f1(float64(i)*slot+slot*0.5), f1(histHeight+10)
		text := l
		if r := []rune(l); len(r) > 12 {
			text = string(r[:11]) + "…"
		}
		out = append(out, histLabel{X: x, Y: y, Transform: "rotate(-40 " + x + " " + y + ")", Text: text, Full: l})
	}
	return out
}

func at(xs []float64, i int) float64 {
	if i < len(xs) {
		return xs[i]
	}
	return 0
}

// psiBar is one feature's horizontal bar.
type psiBar struct {
	Y, TextY, W, Name, Value, Link string
	Flagged                        bool
}

// psiScale is the value at the right edge of the PSI bars: the largest
// score or twice the threshold, whichever is more, so the threshold line
// always shows.
func psiScale(scores []DriftScore) float64 {
	top := 0.0
	for _, s := range scores {
		top = max(top, s.Value, 2*s.Threshold)
	}
	if top == 0 {
		top = 1
	}
	return top
}

func psiBars(scores []DriftScore) []psiBar {
	top := psiScale(scores)
	out := make([]psiBar, len(scores))
	for i, s := range scores {
		out[i] = psiBar{Y: strconv.Itoa(i*barRow + 2), TextY: strconv.Itoa(i*barRow + 12), W: f1(s.Value / top * (barWidth - barLabel - 40)),
			Name: s.Name, Value: strconv.FormatFloat(s.Value, 'f', 3, 64), Link: s.Link, Flagged: s.Flagged}
	}
	return out
}

// psiThresholdX is the x of the threshold line.
func psiThresholdX(scores []DriftScore) string {
	if len(scores) == 0 {
		return "0"
	}
	return f1(barLabel + scores[0].Threshold/psiScale(scores)*(barWidth-barLabel-40))
}

func psiHeight(scores []DriftScore) string { return strconv.Itoa(len(scores)*barRow + 4) }

func fmtScore(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
