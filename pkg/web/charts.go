package web

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"
)

// hour is the last hour of the history, one minute each, ending with now's:
// minutes without an event are filled in (nothing submitted or finished;
// the queue and the pool as the minute before left them).
func hour(ms []minute, now time.Time) []minute {
	end := now.Truncate(time.Minute)
	start := end.Add(-(keepMinutes - 1) * time.Minute)
	out := make([]minute, 0, keepMinutes)
	i := 0
	var last minute
	for i < len(ms) && ms[i].At.Before(start) {
		last = ms[i]
		i++
	}
	for t := start; !t.After(end); t = t.Add(time.Minute) {
		m := minute{At: t, Waiting: last.Waiting, CPUHeld: last.CPUHeldEnd, CPUHeldEnd: last.CPUHeldEnd, CPU: last.CPU}
		if i < len(ms) && !ms[i].At.After(t) {
			m = ms[i]
			m.At = t
			last = ms[i]
			i++
		}
		out = append(out, m)
	}
	return out
}

// Chart sizes, in SVG user units (the style sheet scales them).
const (
	chartW, chartH = 360.0, 110.0
	padL, padB     = 34.0, 16.0
	padT           = 18.0
)

// chart draws one figure of each minute as bars: a title, the largest value
// on the axis, "-60m" and "now" under it, and a dashed line at limit when
// it is not zero (the pool's capacity). Everything it writes is numbers or
// text of this package, escaped all the same.
func chart(title string, ms []minute, of func(minute) float64, unit string, limit float64) template.HTML {
	top := limit
	for _, m := range ms {
		top = math.Max(top, of(m))
	}
	scale := niceCeil(top)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-label="%s">`, chartW, chartH, html.EscapeString(title))
	fmt.Fprintf(&b, `<title>%s</title>`, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="0" y="12" class="t">%s</text>`, html.EscapeString(title))
	plotW, plotH := chartW-padL, chartH-padT-padB
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" class="axis"/>`, padL, padT+plotH, chartW, padT+plotH)
	fmt.Fprintf(&b, `<text x="%g" y="%g" class="l" text-anchor="end">%s</text>`, padL-4, padT+8, num(scale))
	fmt.Fprintf(&b, `<text x="%g" y="%g" class="l" text-anchor="end">0</text>`, padL-4, padT+plotH)
	fmt.Fprintf(&b, `<text x="%g" y="%g" class="l">-60m</text>`, padL, chartH-2)
	fmt.Fprintf(&b, `<text x="%g" y="%g" class="l" text-anchor="end">now · %s</text>`, chartW, chartH-2, html.EscapeString(unit))
	if limit > 0 {
		y := padT + plotH - limit/scale*plotH
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" class="limit"><title>offered: %s</title></line>`, padL, y, chartW, y, num(limit))
	}
	if len(ms) > 0 && scale > 0 {
		w := plotW / float64(len(ms))
		for i, m := range ms {
			v := of(m)
			if v <= 0 {
				continue
			}
			h := v / scale * plotH
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" class="bar"><title>%s: %s</title></rect>`,
				padL+float64(i)*w, padT+plotH-h, math.Max(w-1, 1), h, m.At.UTC().Format("15:04"), num(v))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // #nosec: built above from numbers and escaped text
}

// nodeBars draws each node's cores held against what it offers.
func nodeBars(nodes []nodeRow) template.HTML {
	const rowH, labelW, w = 22.0, 120.0, 360.0
	h := rowH*float64(len(nodes)) + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-label="cores held per node">`, w, h)
	b.WriteString(`<text x="0" y="12" class="t">Cores held per node</text>`)
	for i, n := range nodes {
		y := 20 + rowH*float64(i)
		frac := 0.0
		if n.CPU > 0 {
			frac = math.Min(n.CPUHeld/n.CPU, 1)
		}
		barW := w - labelW - 60
		fmt.Fprintf(&b, `<text x="0" y="%.1f" class="l">%s</text>`, y+13, html.EscapeString(n.Name))
		fmt.Fprintf(&b, `<rect x="%g" y="%.1f" width="%.1f" height="14" class="cap"/>`, labelW, y+2, barW)
		fmt.Fprintf(&b, `<rect x="%g" y="%.1f" width="%.1f" height="14" class="bar"/>`, labelW, y+2, barW*frac)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" class="l">%s/%s</text>`, labelW+barW+4, y+13, num(n.CPUHeld), num(n.CPU))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // #nosec: node names escaped above
}

// niceCeil is the smallest 1, 2 or 5 times a power of ten at least v.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func num(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
