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
	// Scope is "local" (the default); "global" is refused for now.
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
	i := len(w.totals) - 1
	r := w.ps.totals[i]
	k := ks[0]
	field := "total." + k.name
	fd := lookup(tTotal, k.name)
	switch {
	case fd == nil:
		w.unknownIn(k, "total", totalFieldNames)
		return
	case len(ks) > 1:
		w.report(k.at, -1, field, "not a table")
		return
	}
	if f := r.fields[field]; f != nil {
		w.dup(k.at, -1, field, f)
		return
	}
	f := &fieldPos{key: k.at, val: w.nodePos(v)}
	r.fields[field] = f
	if w.check(-1, field, fd.kind, v, f) {
		w.decode(fd, fd.inTotal(&w.totals[i]), v, -1, field)
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
		if c, ok := f.totalConfig(i, errs); ok {
			out = append(out, shaper.Total{Name: t.Name, Limit: c})
		}
	}
	for i := range f.Rules {
		r := &f.Rules[i]
		if r.Total == "" || specs[i].rule.Action != shaper.ActionLimit {
			continue
		}
		switch {
		case !seen[r.Total]:
			errs.add(f.errAt(i, "total", -1, "no [[total]] named %q", r.Total))
		case specs[i].rule.Limit.Shape:
			errs.add(f.errAt(i, "total", -1, "a shaping rule cannot charge a total yet (only policing rules: remove shape)"))
		case r.Scope == "global":
			errs.add(f.errAt(i, "total", -1, "a global rule cannot charge a total: its budget comes in leases from the store, which cannot be handed back when the total refuses a packet"))
		}
		specs[i].rule.Total = r.Total
	}
	return out
}

// totalConfig checks total i's limit and returns it.
func (f *File) totalConfig(i int, errs *errList) (shaper.TotalConfig, bool) {
	t := &f.Totals[i]
	var c shaper.TotalConfig
	rate := "pps"
	switch {
	case t.PPS != nil && t.Bitrate != "":
		errs.add(f.totalErr(i, "bitrate", "pps and bitrate are exclusive: give one"))
		return c, false
	case t.PPS != nil:
		c.Rate = *t.PPS
	case t.Bitrate != "":
		rate = "bitrate"
		r, err := shaper.ParseBitrate(t.Bitrate)
		if err != nil {
			errs.add(f.totalErr(i, "bitrate", "%v", err))
			return c, false
		}
		c.Rate, c.Bytes = r, true
	default:
		errs.add(f.totalErr(i, "", "needs pps or bitrate"))
		return c, false
	}
	if t.Algo != "" {
		a, shape, err := parseAlgo(t.Algo)
		if err != nil || shape {
			errs.add(f.totalErr(i, "algo", "a total is token-bucket, fixed-window or sliding-window-counter, not %q", t.Algo))
			return c, false
		}
		c.Algorithm = a
	}
	switch t.Scope {
	case "", "local":
	case "global":
		errs.add(f.totalErr(i, "scope", "a global total (one cap for every host) is not supported yet: only local totals"))
		return c, false
	default:
		errs.add(f.totalErr(i, "scope", "unknown scope %q (want local)", t.Scope))
		return c, false
	}
	if t.Burst != nil {
		c.Burst = *t.Burst
	}
	c.Window = int64(t.Window)
	if err := c.Check(); err != nil {
		field := rate
		var ce *shaper.ConfigError
		if errors.As(err, &ce) {
			field = f.totalField(i, ce.Settings, rate)
		}
		errs.add(f.totalErr(i, field, "%v", err))
		return c, false
	}
	return c, true
}

// totalField is the field of total i an engine error about settings is
// reported at: the first setting's field the total gives, else its rate's.
func (f *File) totalField(i int, settings []shaper.Setting, rate string) string {
	for _, s := range settings {
		for j := range schema {
			fd := &schema[j]
			if fd.table == tTotal && hasSetting(fd, s) && given(fd.inTotal(&f.Totals[i])) {
				return fd.name
			}
		}
	}
	return rate
}
