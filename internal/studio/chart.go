package studio

import (
	"github.com/ferry-ml/ferry/internal/apitypes"

	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// chart is one metric drawn as an SVG line chart on the server, so it
// shows with scripts off: the values by step, the axes' ranges as text.
type chart struct {
	Name                   string
	Points                 string // the polyline's "x,y x,y ..." in the view box
	Dots                   []dot  // every point, for one-value series and hover titles
	Last                   float64
	MinY, MaxY, MinX, MaxX string
	Count                  int
	Skipped                int // NaN and infinite values, which have no place on the chart
}

type dot struct {
	X, Y  string
	Title string
}

// Chart geometry, in the SVG's view box.
const (
	chartW, chartH = 600.0, 200.0
	chartPad       = 10.0
	maxChartDots   = 200 // past this, the line alone
)

// charts draws each metric of ms, by name, its values ordered by step.
func charts(ms []apitypes.Metric) []chart {
	by := map[string][]apitypes.Metric{}
	for _, m := range ms {
		by[m.Name] = append(by[m.Name], m)
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]chart, 0, len(names))
	for _, n := range names {
		out = append(out, drawChart(n, by[n]))
	}
	return out
}

func drawChart(name string, series []apitypes.Metric) chart {
	c := chart{Name: name}
	pts := make([]apitypes.Metric, 0, len(series))
	for _, m := range series {
		if math.IsNaN(m.Value) || math.IsInf(m.Value, 0) {
			c.Skipped++
			continue
		}
		pts = append(pts, m)
	}
	sort.SliceStable(pts, func(i, j int) bool { return pts[i].Step < pts[j].Step })
	c.Count = len(pts)
	if len(pts) == 0 {
		return c
	}
	minX, maxX := pts[0].Step, pts[len(pts)-1].Step
	minY, maxY := pts[0].Value, pts[0].Value
	for _, p := range pts {
		minY, maxY = math.Min(minY, p.Value), math.Max(maxY, p.Value)
	}
	c.Last = pts[len(pts)-1].Value
	c.MinX, c.MaxX = strconv.FormatInt(minX, 10), strconv.FormatInt(maxX, 10)
	c.MinY, c.MaxY = formatValue(minY), formatValue(maxY)
	x := func(step int64) float64 {
		if maxX == minX {
			return chartW / 2
		}
		return chartPad + (chartW-2*chartPad)*float64(step-minX)/float64(maxX-minX)
	}
	y := func(v float64) float64 {
		if maxY == minY {
			return chartH / 2
		}
		return chartH - chartPad - (chartH-2*chartPad)*(v-minY)/(maxY-minY)
	}
	var b strings.Builder
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		px, py := fmt.Sprintf("%.1f", x(p.Step)), fmt.Sprintf("%.1f", y(p.Value))
		b.WriteString(px + "," + py)
		if len(pts) <= maxChartDots {
			c.Dots = append(c.Dots, dot{X: px, Y: py, Title: fmt.Sprintf("step %d: %s", p.Step, formatValue(p.Value))})
		}
	}
	c.Points = b.String()
	return c
}

func formatValue(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }
