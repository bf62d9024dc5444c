// Package top is `packetshaper top`: a live terminal view of a running
// shaper, like top or iftop. Every interval it asks the shaper's control
// socket (package internal/control) for its status and for its busiest
// flows, and shows per-second rates computed from the difference between
// two successive answers: a header (queues, uptime, packets in, accepted,
// dropped and fail-open passes per second), the rules with their rates and
// the flows with the most drops (or packets) per second.
//
// The model (Snapshot → Model.Update → Model.View → Render) is pure: time
// is the snapshots' At, given by the caller's clock, and rates are counter
// differences over the difference of At. The terminal (term.go) only reads
// keys, sizes and writes frames.
package top

import (
	"cmp"
	"slices"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// MaxFlows bounds the flows a snapshot asks for (the first MaxFlows in the
// order of the sort, by their counters since they started): the model's
// memory of previous counters holds at most that many keys.
const MaxFlows = 1000

// Snapshot is what one refresh read from the shaper.
type Snapshot struct {
	// At is when it was read (the caller's clock).
	At     time.Time
	Status *control.Status
	// Flows are the listing's flows: at most MaxFlows, the first in the
	// order of the sort it was asked with.
	Flows []control.Flow
	// Listed is the number of flows the shaper has (End.Listed): more
	// than len(Flows) when the listing was cut to the first MaxFlows.
	Listed int
}

// Sort is the order of the flows table.
type Sort int

const (
	ByDrops   Sort = iota // most dropped per second first, then most packets
	ByPackets             // most packets per second first, then most dropped
	numSorts
)

func (s Sort) String() string {
	if s == ByPackets {
		return control.SortPackets
	}
	return control.SortDrops
}

// Next is the sort the s key moves to.
func (s Sort) Next() Sort { return (s + 1) % numSorts }

// ParseSort parses "drops" or "packets".
func ParseSort(s string) (Sort, bool) {
	switch s {
	case control.SortDrops:
		return ByDrops, true
	case control.SortPackets:
		return ByPackets, true
	}
	return 0, false
}

// counts are the counters rates are made of.
type counts struct {
	packets, accepted, dropped, shadow, marked uint64
}

// Rates are per-second rates of counts (JSON: each count's name with
// "_per_sec": they are not the counters themselves).
type Rates struct {
	Packets  float64 `json:"packets_per_sec"`
	Accepted float64 `json:"accepted_per_sec"`
	Dropped  float64 `json:"dropped_per_sec"`
	Shadow   float64 `json:"shadow_dropped_per_sec"`
	Marked   float64 `json:"marked_per_sec"`
}

// delta is a counter's increase from prev to cur; a counter that went
// down was reset (a reload, a flow's slot reused): it counted cur since.
func delta(cur, prev uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func rates(cur, prev counts, secs float64) Rates {
	r := func(c, p uint64) float64 { return float64(delta(c, p)) / secs }
	return Rates{
		Packets: r(cur.packets, prev.packets), Accepted: r(cur.accepted, prev.accepted), Dropped: r(cur.dropped, prev.dropped),
		Shadow: r(cur.shadow, prev.shadow), Marked: r(cur.marked, prev.marked),
	}
}

// Header is the view's first lines.
type Header struct {
	Version string   `json:"version"`
	PID     int      `json:"pid"`
	Uptime  float64  `json:"uptime_secs"`
	Policy  string   `json:"policy"`
	Mode    string   `json:"mode"`
	Queues  []uint16 `json:"queues"`
	Bound   int      `json:"bound"`
	// In is the packets per second the queues decided (Packets),
	// Accepted and Dropped of them, and FailOpen the packets per second
	// passed without a verdict because a queue was full.
	In, Accepted, Dropped, FailOpen float64
	// FailOpenTotal is every fail-open pass since the start;
	// FailOpenActive says a queue is full now.
	FailOpenTotal  uint64 `json:"failopen_total"`
	FailOpenActive bool   `json:"failopen_active"`
	// Listed is the number of flows the shaper holds.
	Listed int `json:"flows"`
}

// RuleRow is one rule with its rates.
type RuleRow struct {
	Name  string `json:"name"`
	Limit string `json:"limit"`
	Rates Rates  `json:"rates"`
	Flows uint64 `json:"flows"`
}

// TotalRowName is a total's row among the rules': "total NAME" (a rule's
// name has no space, so it is never a rule's).
func TotalRowName(name string) string { return "total " + name }

// FlowRow is one flow with its rates and totals.
type FlowRow struct {
	Queue uint16 `json:"queue"`
	Rule  string `json:"rule"`
	Key   string `json:"key"`
	// Known is false for a flow not in the previous snapshot's listing
	// when that listing was cut (it may have been there, outside the
	// first MaxFlows): its rates are unknown (0), and it sorts last.
	Known   bool   `json:"known"`
	Rates   Rates  `json:"rates"`
	Packets uint64 `json:"packets"`
	Dropped uint64 `json:"dropped"`
}

// View is one frame's data.
type View struct {
	// Rated is false until two snapshots, in order, have been seen: the
	// rates are then 0.
	Rated    bool      `json:"rated"`
	Interval float64   `json:"interval_secs"`
	Sort     string    `json:"sort"`
	Header   Header    `json:"header"`
	Rules    []RuleRow `json:"rules"`
	Flows    []FlowRow `json:"flows"`
	// More is the number of flows left out of Flows.
	More int `json:"more"`
}

type flowID struct {
	queue     uint16
	rule, key string
}

// Model turns successive snapshots into rates. Its memory is the previous
// snapshot's counters: the rules, the queues and at most MaxFlows flows.
type Model struct {
	have     bool
	at       time.Time
	rules    map[string]counts
	queues   map[uint16]counts // packets, accepted, dropped; shadow holds fail-open passes
	flows    map[flowID]counts
	complete bool // the previous listing held every flow

	// The last update's results.
	secs   float64
	rated  bool
	header Header
	rows   []RuleRow
	frows  []FlowRow
}

// Update takes a new snapshot. A snapshot that is not later than the
// previous one (a clock that went back) gives no rates and does not
// replace the previous counters' time: rates are never made over a
// negative or zero interval.
func (m *Model) Update(s *Snapshot) {
	st := s.Status
	secs := 0.0
	if m.have {
		secs = s.At.Sub(m.at).Seconds()
	}
	rated := secs > 0
	rate := func(cur, prev counts) Rates {
		if !rated {
			return Rates{}
		}
		return rates(cur, prev, secs)
	}

	h := Header{Version: st.Version, PID: st.PID, Uptime: st.UptimeSecs, Policy: st.Policy, Mode: st.Mode, Listed: s.Listed}
	queues := make(map[uint16]counts, len(st.Queues))
	var qr Rates
	for _, q := range st.Queues {
		h.Queues = append(h.Queues, q.Queue)
		if q.Bound {
			h.Bound++
		}
		h.FailOpenTotal += q.FailOpenPassed
		h.FailOpenActive = h.FailOpenActive || q.FailOpenActive
		c := counts{packets: q.Packets, accepted: q.Accepted, dropped: q.Dropped, shadow: q.FailOpenPassed}
		queues[q.Queue] = c
		r := rate(c, m.queues[q.Queue])
		qr.Packets += r.Packets
		qr.Accepted += r.Accepted
		qr.Dropped += r.Dropped
		qr.Shadow += r.Shadow
	}
	h.In, h.Accepted, h.Dropped, h.FailOpen = qr.Packets, qr.Accepted, qr.Dropped, qr.Shadow

	rules := make(map[string]counts, len(st.Rules))
	rows := make([]RuleRow, 0, len(st.Rules))
	for i := range st.Rules {
		r := &st.Rules[i]
		c := counts{packets: r.Packets, accepted: r.Accepted, dropped: r.Dropped, shadow: r.ShadowDropped, marked: r.Marked}
		rules[r.Name] = c
		rows = append(rows, RuleRow{Name: r.Name, Limit: DescribeLimit(r), Rates: rate(c, m.rules[r.Name]), Flows: r.Flows})
	}
	// The totals below the rules, as rules (TotalRowName): their dropped
	// are the packets over the total.
	for i := range st.Totals {
		t := &st.Totals[i]
		name := TotalRowName(t.Name)
		c := counts{packets: t.Packets, accepted: t.Accepted, dropped: t.Dropped}
		rules[name] = c
		lim := control.Rule{Action: "limit", Algorithm: t.Algorithm, Rate: t.Rate, Unit: t.Unit, Burst: t.Burst, WindowSecs: t.WindowSecs}
		rows = append(rows, RuleRow{Name: name, Limit: DescribeLimit(&lim), Rates: rate(c, m.rules[name])})
	}

	n := min(len(s.Flows), MaxFlows)
	flows := make(map[flowID]counts, n)
	frows := make([]FlowRow, 0, n)
	for i := range s.Flows[:n] {
		f := &s.Flows[i]
		id := flowID{f.Queue, f.Rule, f.Key}
		c := counts{packets: f.Packets, accepted: f.Accepted, dropped: f.Dropped, shadow: f.ShadowDropped, marked: f.Marked}
		flows[id] = c
		row := FlowRow{Queue: f.Queue, Rule: f.Rule, Key: f.Key, Packets: f.Packets, Dropped: f.Dropped}
		if prev, ok := m.flows[id]; ok {
			row.Known, row.Rates = rated, rate(c, prev)
		} else if m.complete {
			// The previous listing held every flow: this one is new
			// since, and all its packets came in the interval.
			row.Known, row.Rates = rated, rate(c, counts{})
		}
		frows = append(frows, row)
	}

	m.secs, m.rated, m.header, m.rows, m.frows = secs, rated, h, rows, frows
	if !m.have || rated {
		m.have, m.at = true, s.At
		m.rules, m.queues, m.flows = rules, queues, flows
		m.complete = s.Listed <= len(s.Flows)
	}
}

// View is the last update's frame: the rules in policy order and the
// first n flows (n ≤ 0: all) in sort's order of their rates.
func (m *Model) View(sort Sort, n int) View {
	v := View{Rated: m.rated, Interval: m.secs, Sort: sort.String() + "/s", Header: m.header, Rules: m.rows}
	rows := slices.Clone(m.frows)
	slices.SortFunc(rows, flowOrder(sort))
	if n > 0 && len(rows) > n {
		v.More = len(rows) - n
		rows = rows[:n]
	}
	v.Flows = rows
	return v
}

// flowOrder orders flows by sort's rates, the unknown last, then by their
// totals, then by queue, rule and key.
func flowOrder(sort Sort) func(a, b FlowRow) int {
	return func(a, b FlowRow) int {
		if a.Known != b.Known {
			if a.Known {
				return -1
			}
			return 1
		}
		first, second := a.Rates.Dropped, a.Rates.Packets
		bfirst, bsecond := b.Rates.Dropped, b.Rates.Packets
		t1, t2, bt1, bt2 := a.Dropped, a.Packets, b.Dropped, b.Packets
		if sort == ByPackets {
			first, second, bfirst, bsecond = second, first, bsecond, bfirst
			t1, t2, bt1, bt2 = t2, t1, bt2, bt1
		}
		return cmp.Or(cmp.Compare(bfirst, first), cmp.Compare(bsecond, second),
			cmp.Compare(bt1, t1), cmp.Compare(bt2, t2),
			cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key))
	}
}
