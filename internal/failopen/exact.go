package failopen

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Settling an interval: the rule counters against the queues' id
// sequences, group by group (the queues a set of rules sends to), exact
// where the counters allow it, else estimated (see monitor.go).

// settle accounts the interval since the last settle: exactly from the
// rule counters where they cover a group, else with the estimates. rules
// were read just before the sample taken at now; rulesErr says why they
// could not be (then rules is nil).
func (c *core) settle(now int64, rules []QueueRule, rulesErr error) {
	groups := c.buildGroups(rules, rulesErr)
	old := map[string]*group{}
	for _, g := range c.groups {
		old[g.sig] = g
	}
	counters := map[ruleKey]uint64{}
	for _, r := range rules {
		if r.HasCounter {
			counters[r.key()] = r.Packets
		}
	}
	interval := float64(now-c.lastSet) / 1e9
	var implied float64 // union secs implied by exact counts
	for _, g := range groups {
		prev := old[g.sig]
		if prev != nil {
			g.carry = prev.carry
			g.segmented = prev.segmented
			if prev.mismatch && g.exactOK {
				g.mismatch, g.exactOK, g.why = true, false, prev.why
			}
		}
		if c.settled {
			if d, dRules, ok := c.exactDelta(g, prev, counters); ok {
				implied = max(implied, c.addExact(g, d, dRules, interval))
			} else {
				segFull := g.segmented && g.mayFull()
				for _, q := range g.queues {
					q.estimated += q.est
					if q.est > 0 || q.secsSince > 0 || segFull && q.mayFull {
						q.tainted, q.repEst = true, true
					}
				}
			}
		}
		// The baseline for the next interval.
		g.base = g.exactOK
		g.ids = make([]uint32, len(g.queues))
		g.drops = make([]uint64, len(g.queues))
		for i, q := range g.queues {
			g.ids[i], g.drops[i] = q.id, q.drops
			g.base = g.base && q.have
			q.est, q.secsSince, q.idSince, q.broken, q.mayFull = 0, 0, 0, false, false
		}
		newMismatch := g.mismatch && (prev == nil || !prev.mismatch) // logged by exactDelta
		if c.log != nil && !newMismatch && (prev == nil || prev.exactOK != g.exactOK || prev.why != g.why) {
			c.logMethod(g)
		}
	}
	c.unionSecs += implied
	if !c.settled {
		c.firstSet = now
	}
	if rulesErr == nil {
		c.warnIdle(now, groups)
	}
	c.groups = groups
	c.prevRules = counters
	c.settled, c.lastSet, c.wantSet = true, now, false
	for _, q := range c.qs {
		c.report(q, now, false)
	}
}

// exactDelta returns the packets group g passed by fail-open since the
// last settle, from its rules' counters, and the packets that hit its
// rules; ok is false if they cannot tell.
func (c *core) exactDelta(g, prev *group, counters map[ruleKey]uint64) (d, dRules uint64, ok bool) {
	if !g.exactOK || prev == nil || !prev.base {
		return 0, 0, false
	}
	var dIDs uint64
	for i, q := range g.queues {
		if !q.have || q.broken {
			return 0, 0, false
		}
		// Packets a fail-closed queue dropped hit the rule without
		// getting an id either.
		dIDs += uint64(q.id-prev.ids[i]) + (q.drops - prev.drops[i])
	}
	for _, k := range g.rules {
		now, ok1 := counters[k]
		was, ok2 := c.prevRules[k]
		if !ok1 || !ok2 || now < was {
			return 0, 0, false // new, gone, or reset (iptables -Z)
		}
		dRules += now - was
	}
	// The counters and the ids are not read at the same instant: a few
	// packets may show in one and not yet in the other. Carry a small
	// negative difference to the next interval; a large one means the
	// counters do not count what the queues receive.
	diff := int64(dRules) - int64(dIDs) + g.carry
	tol := 256 + int64(dRules/32)
	mayFull := g.mayFull()
	switch {
	case g.segmented && mayFull:
		// Rule hits and segments: only the estimate counts what passed.
		g.carry = 0
		return 0, 0, false
	case g.segmented || diff < -tol && !mayFull:
		// No queue can have filled: nothing passed, whatever the
		// counters say.
		g.carry = 0
		if !g.segmented {
			g.segmented = true
			if c.log != nil {
				qs := queueList(g.nums())
				c.log.Info(fmt.Sprintf("nfq: queue %s: the rules' counters counted fewer packets (%d) than the queue received (%d) while it could not fill: GSO packets the kernel queues as several segments (or rules this monitor cannot see); packets passed by fail-open stay exact (none) while the queue cannot fill and are estimated, in segments, when it may have", qs, dRules, dIDs),
					"queue", qs, KeyExact, true)
			}
		}
		return 0, dRules, true
	case diff < -tol:
		g.carry = 0
		g.mismatch, g.exactOK = true, false
		g.why = fmt.Sprintf("the rules' counters counted fewer packets (%d) than the queue received (%d): rules that queue GSO packets as several segments, or rules this monitor cannot see (iptables-legacy)?", dRules, dIDs)
		if c.log != nil {
			c.log.Warn(fmt.Sprintf("nfq: queue %s: packets passed by fail-open are estimated from the arrival rate from now on: %s", queueList(g.nums()), g.why),
				"queue", queueList(g.nums()), KeyExact, false)
		}
		return 0, 0, false
	case diff < 0:
		g.carry = diff
		return 0, dRules, true
	}
	g.carry = 0
	return uint64(diff), dRules, true
}

// addExact adds d packets passed by group g, split between its queues by
// their estimates (else the time they were full, else the ids they
// consumed, else evenly). If no queue was seen full, the queue filled
// between samples: it adds the time d took at the average arrival rate.
// It returns that time (0 if none).
func (c *core) addExact(g *group, d, dRules uint64, interval float64) float64 {
	if d == 0 {
		return 0
	}
	w := make([]float64, len(g.queues))
	for _, pick := range []func(*qmon) float64{
		func(q *qmon) float64 { return q.est },
		func(q *qmon) float64 { return q.secsSince },
		func(q *qmon) float64 { return float64(q.idSince) },
		func(*qmon) float64 { return 1 },
	} {
		var sum float64
		for i, q := range g.queues {
			w[i] = pick(q)
			sum += w[i]
		}
		if sum > 0 {
			break
		}
	}
	shares := split(d, w)
	var seenFull float64
	for _, q := range g.queues {
		seenFull += q.secsSince
	}
	var implied float64
	if seenFull == 0 && dRules > 0 && interval > 0 {
		implied = min(float64(d)/(float64(dRules)/interval), interval)
	}
	for i, q := range g.queues {
		q.exact += shares[i]
		if implied > 0 {
			s := implied * float64(shares[i]) / float64(d)
			q.secs += s
			q.secsSince += s
		}
	}
	return implied
}

// split divides n in proportion to the weights w (not all zero), the
// remainder going to the largest weights.
func split(n uint64, w []float64) []uint64 {
	var sum float64
	for _, x := range w {
		sum += x
	}
	out := make([]uint64, len(w))
	var given uint64
	for i, x := range w {
		out[i] = uint64(math.Floor(float64(n) * x / sum))
		given += out[i]
	}
	for given < n {
		best := 0
		for i := range w {
			if w[i] > w[best] || (w[i] == w[best] && out[i] < out[best]) {
				best = i
			}
		}
		out[best]++
		given++
		w[best] /= 2 // the next one to the next largest
	}
	return out
}

// buildGroups links our queues by the rules that send to them.
func (c *core) buildGroups(rules []QueueRule, rulesErr error) []*group {
	parent := make([]int, len(c.qs))
	for i := range parent {
		parent[i] = i
	}
	var find func(int) int
	find = func(i int) int {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	type ruleCover struct {
		r       QueueRule
		covered []int
	}
	var covers []ruleCover
	computed := ""
	for _, r := range rules {
		if r.Computed {
			if computed == "" {
				computed = r.String()
			}
			continue
		}
		var cov []int
		for i, q := range c.qs {
			if r.Covers(q.num) {
				cov = append(cov, i)
			}
		}
		if len(cov) == 0 {
			continue
		}
		for _, i := range cov[1:] {
			parent[find(i)] = find(cov[0])
		}
		covers = append(covers, ruleCover{r, cov})
	}
	byRoot := map[int]*group{}
	var groups []*group
	for i, q := range c.qs {
		root := find(i)
		g := byRoot[root]
		if g == nil {
			g = &group{exactOK: true}
			byRoot[root] = g
			groups = append(groups, g)
		}
		g.queues = append(g.queues, q)
		q.group = g
	}
	for _, rc := range covers {
		g := byRoot[find(rc.covered[0])]
		g.rules = append(g.rules, rc.r.key())
		switch {
		case !rc.r.HasCounter && g.why == "":
			g.exactOK, g.why = false, fmt.Sprintf("rule %s has no counter", rc.r)
		case len(rc.covered) < int(rc.r.Queues) && g.why == "":
			g.exactOK, g.why = false, fmt.Sprintf("rule %s also sends to queues this monitor does not serve", rc.r)
		}
	}
	for _, g := range groups {
		var b strings.Builder
		fmt.Fprintf(&b, "%v", g.nums())
		slices.SortFunc(g.rules, func(a, b ruleKey) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range g.rules {
			b.WriteString("|" + k.String())
		}
		g.sig = b.String()
		switch {
		case c.estimateOnly:
			g.exactOK, g.why = false, "rule counters not read (EstimateOnly)"
		case rulesErr != nil:
			g.exactOK, g.why = false, fmt.Sprintf("cannot read the nf_tables rules: %v", rulesErr)
		case len(g.rules) == 0:
			g.exactOK, g.why = false, "no nf_tables rule sends to it (an iptables-legacy rule?)"
		case computed != "":
			g.exactOK, g.why = false, fmt.Sprintf("rule %s takes its queue number from an expression", computed)
		}
	}
	return groups
}

// idleAfter is how long after the first settle an empty queue that no
// rule feeds is said to be so: the divert rules are usually added before
// the shaper starts (the unit's ExecStartPre), or just after.
const idleAfter = int64(5 * time.Second)

// warnIdle logs, once, a warning for a group that no nf_tables rule sends
// to and whose queues have received no packet since the shaper bound them:
// nothing is diverted, so nothing is shaped.
func (c *core) warnIdle(now int64, groups []*group) {
	if c.idleSaid || c.log == nil || !c.settled || now-c.firstSet < idleAfter {
		return
	}
	for _, g := range groups {
		if len(g.rules) > 0 || c.estimateOnly {
			continue
		}
		empty := true
		for _, q := range g.queues {
			empty = empty && q.have && q.id == 0 && q.drops == 0
		}
		if !empty {
			continue
		}
		c.idleSaid = true
		qs := queueList(g.nums())
		c.log.Warn(fmt.Sprintf("nfq: queue %s has received no packet and no nf_tables rule sends to it: nothing is diverted, so nothing is shaped; add the divert rule: sudo packetshaper-rules add --queue %s --policy FILE (or --proto udp --dport PORT; packetshaper divert --policy FILE prints what the rule file needs)", qs, qs),
			"queue", qs)
		return
	}
}

// mayFull reports whether a queue of g may have filled since the last
// settle.
func (g *group) mayFull() bool {
	for _, q := range g.queues {
		if q.mayFull {
			return true
		}
	}
	return false
}

func (g *group) nums() []uint16 {
	n := make([]uint16, len(g.queues))
	for i, q := range g.queues {
		n[i] = q.num
	}
	return n
}

// logMethod says how a group's fail-open passes are counted.
func (c *core) logMethod(g *group) {
	qs := queueList(g.nums())
	closed := true
	for _, q := range g.queues {
		closed = closed && q.failClosed
	}
	if closed {
		c.log.Info(fmt.Sprintf("nfq: queue %s is fail-closed: packets that find it full are dropped (queue_dropped), none passes without a verdict", qs),
			"queue", qs)
		return
	}
	if g.exactOK {
		rs := make([]string, len(g.rules))
		for i, k := range g.rules {
			rs[i] = k.String()
		}
		c.log.Info(fmt.Sprintf("nfq: queue %s: packets passed by fail-open are counted exactly, from the counters of rule %s", qs, strings.Join(rs, ", ")),
			"queue", qs, KeyExact, true)
		return
	}
	c.log.Info(fmt.Sprintf("nfq: queue %s: packets passed by fail-open are estimated from the arrival rate: %s", qs, g.why),
		"queue", qs, KeyExact, false)
}
