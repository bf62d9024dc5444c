package policy

import (
	"errors"
	"fmt"

	"github.com/packetshaper/packetshaper/shaper"
	"github.com/pelletier/go-toml/v2/unstable"
)

// TotalDef is a [[total]] table: a limit that the limit rules naming it
// (Rule.Total) charge together, beside each flow's own limit. Zero values
// mean the defaults.
type TotalDef struct {
	// Name is required and unique among the totals.
	Name string
	// PPS or Bitrate: the total's limit (exactly one).
	PPS     *float64
	Bitrate string
	// Burst is the token bucket's capacity (default as a rule's).
	Burst *float64
	// Algo is "token-bucket" (the default), "fixed-window" or
	// "sliding-window-counter".
	Algo string
	// Window is the window algorithms' window (default 1s).
	Window Duration
	// Scope is "local" (the default) or "global": one cap for every host
	// running it, kept in the [redis] store, each flow's limit still
	// local (token-bucket and fixed-window; policing rules only).
	Scope string
}

// totalTable starts a [[total]] table.
func (w *walker) totalTable(e *unstable.Node, ks []keyPart) {
	if len(ks) > 1 {
		w.report(ks[1].at, -1, "total."+ks[1].name, "not a table")
		return
	}
	w.ps.totals = append(w.ps.totals, &rulePos{at: w.headerPos(e), fields: map[string]*fieldPos{}})
	w.totals = append(w.totals, TotalDef{})
	w.ctx = ctxTotal
}

// totalKV checks a key of the current [[total]] table and decodes it.
func (w *walker) totalKV(ks []keyPart, v *unstable.Node) {
	n := len(w.totals) - 1
	w.totalField(-1, w.ps.totals[n].fields, &w.totals[n], ks, v)
}

// totalField checks the key ks of a total (rule i's own, or a [[total]]'s
// for i < 0) whose fields' places are in fields, and decodes it into t.
func (w *walker) totalField(i int, fields map[string]*fieldPos, t *TotalDef, ks []keyPart, v *unstable.Node) {
	k := ks[0]
	field := "total." + k.name
	fd := lookup(tTotal, k.name)
	switch {
	case fd == nil:
		w.unknownIn(k, i, "total", totalFieldNames)
		return
	case i >= 0 && k.name == "name":
		w.report(k.at, i, field, "a rule's own total has no name: write a [[total]] to share one")
		return
	case len(ks) > 1:
		w.report(k.at, i, field, "not a table")
		return
	}
	if f := fields[field]; f != nil {
		w.dup(k.at, i, field, f)
		return
	}
	f := &fieldPos{key: k.at, val: w.nodePos(v)}
	fields[field] = f
	if w.check(i, field, fd.kind, v, f) {
		w.decode(fd, fd.inTotal(t), v, i, field)
	}
}

// totalErr is a problem with total i's field ("pps"; "" for the table).
func (f *File) totalErr(i int, field, format string, args ...any) *Error {
	name := f.Totals[i].Name
	if name == "" {
		name = fmt.Sprintf("#%d", i+1)
	}
	e := &Error{File: f.Name, Msg: fmt.Sprintf("total %s: ", name) + fmt.Sprintf(format, args...)}
	if field != "" {
		e.Field = "total." + field
	}
	if f.pos != nil && i < len(f.pos.totals) {
		t := f.pos.totals[i]
		at := t.at
		if fp := t.fields[e.Field]; fp != nil {
			at = fp.val
		}
		e.Line, e.Col = at.line, at.col
	}
	return e
}

// checkTotals checks the [[total]] tables and the rules' total fields, and
// returns the engine's totals.
func (f *File) checkTotals(specs []ruleSpec, errs *errList) []shaper.Total {
	var out []shaper.Total
	seen := map[string]bool{}
	for i := range f.Totals {
		t := &f.Totals[i]
		switch {
		case t.Name == "":
			errs.add(f.totalErr(i, "name", "missing: every total needs a unique name"))
			continue
		case !validName(t.Name):
			errs.add(f.totalErr(i, "name", "%q is not a valid name: use letters, digits, \"_\", \".\" and \"-\"", t.Name))
			continue
		case seen[t.Name]:
			errs.add(f.totalErr(i, "name", "declared twice"))
			continue
		}
		seen[t.Name] = true
		bad := func(field, format string, args ...any) { errs.add(f.totalErr(i, field, format, args...)) }
		if c, ok := totalConfig(t, bad); ok {
			if c.Global && f.Redis == nil {
				bad("scope", "\"global\" needs the [redis] table: the addrs of the store the hosts share")
				continue
			}
			out = append(out, shaper.Total{Name: t.Name, Limit: c})
		}
	}
	for i := range f.Rules {
		r := &f.Rules[i]
		if r.OwnTotal != nil && specs[i].rule.Action != shaper.ActionLimit && r.Action != "" {
			errs.add(f.errAt(i, "total", -1, "not allowed on %s rule: only limit rules take it", article(r.Action)))
		}
		if r.Total == "" && r.OwnTotal == nil || specs[i].rule.Action != shaper.ActionLimit {
			continue
		}
		name := r.Total
		if r.OwnTotal != nil {
			bad := func(field, format string, args ...any) {
				at := "total"
				if field != "" {
					at += "." + field
				}
				errs.add(f.errAt(i, at, -1, format, args...))
			}
			c, ok := totalConfig(r.OwnTotal, bad)
			if !ok {
				continue
			}
			if c.Global && f.Redis == nil {
				bad("scope", "\"global\" needs the [redis] table: the addrs of the store the hosts share")
				continue
			}
			name = OwnTotalName(r.Name)
			out = append(out, shaper.Total{Name: name, Limit: c})
			seen[name] = true
		}
		switch {
		case !seen[name]:
			errs.add(f.errAt(i, "total", -1, "no [[total]] named %q", r.Total))
		case specs[i].rule.Limit.Shape && globalTotal(out, name):
			errs.add(f.errAt(i, "total", -1, "a shaping rule cannot charge a global total: its budget comes in leases from the store, not as a departure time per packet (make the total local, or police)"))
		case specs[i].rule.Limit.Shape && !shapingTotal(out, name):
			errs.add(f.errAt(i, "total", -1, "a shaping rule's total is a token bucket (it holds packets until the total has room): not a window algorithm"))
		case r.Scope == "global":
			errs.add(f.errAt(i, "total", -1, "a global rule cannot charge a total: its budget comes in leases from the store, which cannot be handed back when the total refuses a packet"))
		}
		specs[i].rule.Total = name
	}
	return out
}

// shapingTotal reports whether the total named name, if it is among
// totals, can hold a shaping rule's packets: a token bucket.
func shapingTotal(totals []shaper.Total, name string) bool {
	for _, t := range totals {
		if t.Name == name {
			return t.Limit.Algorithm == shaper.TokenBucket
		}
	}
	return true
}

// globalTotal reports whether the total named name, if it is among
// totals, is global.
func globalTotal(totals []shaper.Total, name string) bool {
	for _, t := range totals {
		if t.Name == name {
			return t.Limit.Global
		}
	}
	return false
}

// GlobalTotals names the global totals (scope = "global"), as the engine
// names them (a rule's own: OwnTotalName).
func (c *Compiled) GlobalTotals() []string {
	return globalNames(c.totals, func(t shaper.Total) (string, bool) { return t.Name, t.Limit.Global })
}

// globalNames names the items of xs that are global, in order (nil for
// none): name returns an item's name and whether it is.
func globalNames[T any](xs []T, name func(T) (string, bool)) []string {
	var names []string
	for _, x := range xs {
		if n, ok := name(x); ok {
			names = append(names, n)
		}
	}
	return names
}

// totalConfig checks the limit of t and returns it; bad reports a
// problem with one of its fields ("" for the table).
func totalConfig(t *TotalDef, bad func(field, format string, args ...any)) (shaper.TotalConfig, bool) {
	var c shaper.TotalConfig
	rate := "pps"
	switch {
	case t.PPS != nil && t.Bitrate != "":
		bad("bitrate", "pps and bitrate are exclusive: give one")
		return c, false
	case t.PPS != nil:
		c.Rate = *t.PPS
	case t.Bitrate != "":
		rate = "bitrate"
		r, err := shaper.ParseBitrate(t.Bitrate)
		if err != nil {
			bad("bitrate", "%v", err)
			return c, false
		}
		c.Rate, c.Bytes = r, true
	default:
		bad("", "needs pps or bitrate")
		return c, false
	}
	if t.Algo != "" {
		a, shape, err := parseAlgo(t.Algo)
		if err != nil || shape {
			bad("algo", "a total is token-bucket, fixed-window or sliding-window-counter, not %q", t.Algo)
			return c, false
		}
		c.Algorithm = a
	}
	switch t.Scope {
	case "", "local":
	case "global":
		c.Global = true
	default:
		bad("scope", "unknown scope %q (want local or global)", t.Scope)
		return c, false
	}
	if t.Burst != nil {
		if c.Burst = *t.Burst; !(c.Burst >= 1) {
			bad("burst", "must be at least 1, not %v", c.Burst)
			return c, false
		}
	}
	c.Window = int64(t.Window)
	if err := c.Check(); err != nil {
		field := rate
		var ce *shaper.ConfigError
		if errors.As(err, &ce) {
			field = totalField(t, ce.Settings, rate)
		}
		bad(field, "%v", err)
		return c, false
	}
	return c, true
}

// totalField is the field of t an engine error about settings is reported
// at: the first setting's field t gives, else its rate's.
func totalField(t *TotalDef, settings []shaper.Setting, rate string) string {
	for _, s := range settings {
		for j := range schema {
			fd := &schema[j]
			if fd.table == tTotal && hasSetting(fd, s) && fd.given(fd.inTotal(t)) {
				return fd.name
			}
		}
	}
	return rate
}

// OwnTotalName is the engine's name of rule name's own total ([rule.total]),
// which no [[total]] can have (":" is not in a name).
func OwnTotalName(rule string) string { return "rule:" + rule }

// ruleTotalTable starts a [rule.total] table of rule i.
func (w *walker) ruleTotalTable(i int, ks []keyPart) {
	if len(ks) > 2 {
		w.report(ks[2].at, i, "total."+ks[2].name, "not a table")
		return
	}
	if w.startOwnTotal(i, ks[1].at, false) {
		w.ctx = ctxRuleTotal
	}
}

// startOwnTotal gives rule i its own total, written at at; dotted: by
// total.KEY = ... keys, which may go on.
func (w *walker) startOwnTotal(i int, at pos, dotted bool) bool {
	r := w.ps.rules[i]
	if f := r.fields["total"]; f != nil {
		if dotted && r.fields["total."] != nil {
			return true
		}
		w.dup(at, i, "total", f)
		return false
	}
	r.fields["total"] = &fieldPos{key: at, val: at}
	if dotted {
		r.fields["total."] = r.fields["total"]
	}
	w.rules[i].OwnTotal = &TotalDef{}
	return true
}

// ruleTotal handles total = { ... } and total.KEY = ... in rule i.
func (w *walker) ruleTotal(i int, ks []keyPart, v *unstable.Node) {
	if len(ks) > 1 {
		if w.startOwnTotal(i, ks[0].at, true) {
			w.ruleTotalKV(i, ks[1:], v)
		}
		return
	}
	if w.startOwnTotal(i, ks[0].at, false) {
		for it := v.Children(); it.Next(); {
			w.ruleTotalKV(i, w.keys(it.Node()), it.Node().Value())
		}
	}
}

// ruleTotalKV checks a key of rule i's own total and decodes it.
func (w *walker) ruleTotalKV(i int, ks []keyPart, v *unstable.Node) {
	w.totalField(i, w.ps.rules[i].fields, w.rules[i].OwnTotal, ks, v)
}

// unknownRedis reports an unknown field of the [redis] table.
func (w *walker) unknownRedis(k keyPart) { w.unknownIn(k, -1, "redis", redisFieldNames) }

// unknownIn reports an unknown field of the table named table ("redis",
// "total") of rule i (-1: none) whose fields are known.
func (w *walker) unknownIn(k keyPart, i int, table string, known []string) {
	msg := "unknown field"
	best, bestD := "", 3
	for _, n := range known {
		if d := editDistance(k.name, n); d < bestD && d <= len(k.name)/2 {
			best, bestD = n, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	w.report(k.at, i, table+"."+keyText(k.name), "%s", msg)
}
