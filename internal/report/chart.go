package report

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/replay"
)

// A chart is one SVG plot of packets per second over capture time: stacked
// areas (accepted, then dropped on top: together the offered rate) and
// lines, each a bucket-wide step per Timeline bucket. Everything in it is
// computed here and formatted, for the template to lay out.
type chart struct {
	ID, Title string
	W, H      int
	// The plot area, and where the axes' labels go.
	X0, Y0, PW, PH float64
	X1, Y1         float64 // X0+PW, Y0+PH
	YLabX, XLabY   float64
	XMid           float64
	XTicks, YTicks []tick
	XCaption       string
	Series         []seriesView
	Cols           []col
	Empty          bool

	specs []spec
}

type tick struct {
	Pos   float64
	Label string
}

// seriesView is one drawn series: an area (Points is a closed polygon) or
// a line (a polyline).
type seriesView struct {
	Name, Class string
	Area        bool
	Points      string
	Title       string
	Total       string
}

// col is a bucket's hover target: its <title> lists every series' rate.
type col struct {
	X, W  float64
	Title string
}

// accepted is a pseudo-kind: Offered − Dropped.
const accepted replay.Kind = -1

type spec struct {
	name, class string
	area        bool
	rows        []int
	kind        replay.Kind
	vals        []float64 // per bucket, packets/s
	counts      []uint64
}

func newChart(id, title string, tl *replay.Timeline, w, h int) *chart {
	const left, right, top, bottom = 52, 12, 8, 30
	c := &chart{
		ID: id, Title: title, W: w, H: h,
		X0: left, Y0: top, PW: float64(w - left - right), PH: float64(h - top - bottom),
	}
	c.X1, c.Y1 = c.X0+c.PW, c.Y0+c.PH
	c.YLabX, c.XLabY, c.XMid = c.X0-6, c.Y1+14, c.X0+c.PW/2
	return c
}

// stacked adds the accepted area and, if over is not empty, the area of
// kind k on top of it (the dropped packets: accepted + dropped = offered).
func (c *chart) stacked(tl *replay.Timeline, rows []int, over string, k replay.Kind) {
	c.specs = append(c.specs, spec{name: countname.Accepted, class: countname.Accepted, area: true, rows: rows, kind: accepted})
	if over != "" {
		c.specs = append(c.specs, spec{name: over, class: countname.Dropped, area: true, rows: rows, kind: k})
	}
}

// line adds a line of kind k summed over rows.
func (c *chart) line(tl *replay.Timeline, rows []int, name string, k replay.Kind, class string) {
	c.specs = append(c.specs, spec{name: name, class: class, rows: rows, kind: k})
}

func count(tl *replay.Timeline, b int, rows []int, k replay.Kind) uint64 {
	var n uint64
	for _, r := range rows {
		if k == accepted {
			n += tl.Count(b, r, replay.Offered) - tl.Count(b, r, replay.Dropped)
		} else {
			n += tl.Count(b, r, k)
		}
	}
	return n
}

// peak is the highest rate of kind k over rows in any bucket.
func (c *chart) peak(tl *replay.Timeline, rows []int, k replay.Kind) float64 {
	var m uint64
	for b := range tl.Len() {
		m = max(m, count(tl, b, rows, k))
	}
	return float64(m) / tl.Width().Seconds()
}

// finish computes the scales, the series' shapes and the hover targets.
func (c *chart) finish(tl *replay.Timeline) {
	n := tl.Len()
	secs := tl.Width().Seconds()
	ymax := 0.0
	for i := range c.specs {
		s := &c.specs[i]
		s.vals = make([]float64, n)
		s.counts = make([]uint64, n)
		for b := range n {
			s.counts[b] = count(tl, b, s.rows, s.kind)
			s.vals[b] = float64(s.counts[b]) / secs
		}
	}
	// The stacked areas' tops.
	base := make([]float64, n)
	tops := make([][]float64, len(c.specs))
	for i := range c.specs {
		s := &c.specs[i]
		top := s.vals
		if s.area {
			top = make([]float64, n)
			for b := range n {
				top[b] = base[b] + s.vals[b]
			}
		}
		tops[i] = top
		for _, v := range top {
			ymax = max(ymax, v)
		}
		if s.area {
			copy(base, top)
		}
	}
	c.Empty = n == 0
	step := niceStep(ymax / 4)
	yTop := step * math.Max(1, math.Ceil(ymax/step-1e-9))
	for v := 0.0; v <= yTop+step/2; v += step {
		c.YTicks = append(c.YTicks, tick{Pos: r1(c.y(v, yTop)), Label: rate(v)})
	}
	span := time.Duration(max(n, 1)) * tl.Width()
	xs := durationStep(span / 8)
	for d := time.Duration(0); d <= span; d += xs {
		c.XTicks = append(c.XTicks, tick{Pos: r1(c.X0 + c.PW*float64(d)/float64(span)), Label: fmtDuration(d)})
	}
	c.XCaption = "capture time since " + fmtTime(tl.Start()) + " · " + fmtDuration(tl.Width()) + " buckets"

	x := func(b int) float64 { return c.X0 + c.PW*float64(b)/float64(max(n, 1)) }
	base = make([]float64, n)
	for i := range c.specs {
		s := &c.specs[i]
		var pts []byte
		for b := range n {
			y := c.y(tops[i][b], yTop)
			pts = point(pts, x(b), y)
			pts = point(pts, x(b+1), y)
		}
		if s.area {
			for b := n - 1; b >= 0; b-- {
				y := c.y(base[b], yTop)
				pts = point(pts, x(b+1), y)
				pts = point(pts, x(b), y)
			}
			copy(base, tops[i])
		}
		var total uint64
		peak := 0.0
		for b := range n {
			total += s.counts[b]
			peak = max(peak, s.vals[b])
		}
		c.Series = append(c.Series, seriesView{
			Name: s.name, Class: s.class, Area: s.area, Points: strings.TrimSpace(string(pts)),
			Title: fmt.Sprintf("%s: %s packets, peak %s/s", s.name, num(total), rate(peak)),
			Total: num(total),
		})
	}
	for b := range n {
		var t strings.Builder
		from := time.Duration(b) * tl.Width()
		fmt.Fprintf(&t, "%s – %s", fmtDuration(from), fmtDuration(from+tl.Width()))
		for _, s := range c.specs {
			fmt.Fprintf(&t, "\n%s %s/s (%s)", s.name, rate(s.vals[b]), num(s.counts[b]))
		}
		c.Cols = append(c.Cols, col{X: r1(x(b)), W: r1(x(b+1)) - r1(x(b)), Title: t.String()})
	}
	c.specs = nil
}

// y maps a rate to the plot's y coordinate.
func (c *chart) y(v, top float64) float64 {
	return c.Y0 + c.PH - c.PH*v/top
}

// r1 rounds v to a tenth: coordinates in the page are given to a tenth
// of a unit.
func r1(v float64) float64 { return math.Round(v*10) / 10 }

func point(b []byte, x, y float64) []byte {
	b = strconv.AppendFloat(b, x, 'f', 1, 64)
	b = append(b, ',')
	b = strconv.AppendFloat(b, y, 'f', 1, 64)
	return append(b, ' ')
}

// niceStep is the least of 1, 2 and 5 times a power of ten that is at
// least x (x ≤ 0: 1).
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// durationSteps are the x axis' tick spacings.
var durationSteps = []time.Duration{
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 200 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// durationStep is the least tick spacing of at least d.
func durationStep(d time.Duration) time.Duration {
	for _, s := range durationSteps {
		if s >= d {
			return s
		}
	}
	s := durationSteps[len(durationSteps)-1]
	for s < d {
		s *= 2
	}
	return s
}
