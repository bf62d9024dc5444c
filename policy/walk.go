package policy

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// The walk reads the document with go-toml's unstable.Parser, which keeps
// the byte range of every key and value: it records where each rule and
// field is (for the errors validation finds later) and checks the shape of
// the document against the schema below, so that unknown fields, wrong
// types, duplicates and misplaced tables are reported in the file's terms
// ("pps: want a number, not a string") rather than the decoder's (Go type
// names), at the exact key or value.

type pos struct{ line, col int }

func (p pos) before(q pos) bool { return p.line < q.line || p.line == q.line && p.col < q.col }

// fieldPos is where a field's key, value and list items are.
type fieldPos struct {
	key, val pos
	items    []pos
}

type rulePos struct {
	at     pos // the [[rule]] header or the inline table's "{"
	name   string
	fields map[string]*fieldPos // "pps", "match", "match.src"
	// matchBy is how the match table was written (dup detection).
	matchBy int
}

const (
	matchInline = iota + 1
	matchDotted
	matchHeader
)

type positions struct {
	rules []*rulePos
	// redis is the [redis] table's place and fields ("redis.addrs"); nil
	// if the file has none.
	redis *rulePos
	// totals are the [[total]] tables' places and fields ("total.pps").
	totals []*rulePos
}

// redisAt is where the [redis] table's field (item j, or the value for
// j < 0) is: the closest known place, down to the table itself.
func (ps *positions) redisAt(field string, j int) pos {
	if ps.redis == nil {
		return pos{}
	}
	return ps.redis.fieldAt(field, j)
}

// at is where rule i's field (item j, or the value for j < 0) is: the
// closest known place, down to the rule's header.
func (ps *positions) at(i int, field string, j int) pos {
	if i < 0 || i >= len(ps.rules) {
		return pos{}
	}
	return ps.rules[i].fieldAt(field, j)
}

// fieldAt is where the table's field (item j, or the value for j < 0) is:
// the closest known place, down to the table's header.
func (r *rulePos) fieldAt(field string, j int) pos {
	if f := r.fields[field]; f != nil {
		if j >= 0 && j < len(f.items) {
			return f.items[j]
		}
		if f.val.line > 0 {
			return f.val
		}
		return f.key
	}
	return r.at
}

// label names rule i in e.
func (ps *positions) label(e *Error, i int) {
	if n := ps.rules[i].name; n != "" {
		e.Rule = n
	} else {
		e.Index = i + 1
	}
}

func nodeKind(k unstable.Kind) string {
	switch k {
	case unstable.String:
		return "a string"
	case unstable.Integer:
		return "an integer"
	case unstable.Float:
		return "a float"
	case unstable.Bool:
		return "a boolean"
	case unstable.Array:
		return "a list"
	case unstable.InlineTable:
		return "a table"
	}
	return "a date or time"
}

// walker is one walk over a document.
type walker struct {
	name  string
	data  []byte
	lines []int // offset of each line's start
	p     unstable.Parser
	ps    positions
	// first is the first problem found; the walk goes on after it only
	// to learn the rules' names.
	first *issue
	// ruleForm: 0 no rules yet, 1 [[rule]] tables, 2 rule = [ ... ].
	ruleForm int
	ctx      int
	// rules and redis are what the walk decodes; vals the problems
	// with values of the right kind (decode).
	rules  []Rule
	redis  *Redis
	totals []TotalDef
	vals   []*issue
}

const (
	ctxRoot = iota
	ctxRule
	ctxMatch
	ctxRedis
	ctxTotal
	ctxRuleTotal
	ctxSkip
)

type issue struct {
	at    pos
	rule  int // -1: none
	field string
	msg   string
}

type keyPart struct {
	name string
	at   pos
}

// walk checks data's shape, records its positions and decodes it. The
// error, if any, is the first problem in the document's shape; the value
// problems of a document without one are in errs.
func walk(name string, data []byte) (f *File, errs errList, err *Error) {
	w, err := walkOnly(name, data)
	if err != nil {
		return nil, nil, err
	}
	f = &File{Name: name, Rules: w.rules, Redis: w.redis, Totals: w.totals, pos: &w.ps}
	for i := range f.Rules {
		if f.Rules[i].Match.empty() {
			f.Rules[i].Match = nil
		}
	}
	for _, is := range w.vals {
		errs.add(w.errorOf(is))
	}
	return f, errs, nil
}

func walkOnly(name string, data []byte) (*walker, *Error) {
	w := &walker{name: name, data: data, lines: []int{0}}
	for i, c := range data {
		if c == '\n' {
			w.lines = append(w.lines, i+1)
		}
	}
	w.p.Reset(data)
	for w.p.NextExpression() {
		e := w.p.Expression()
		switch e.Kind {
		case unstable.KeyValue:
			w.keyValue(e)
		case unstable.Table:
			w.table(e)
		case unstable.ArrayTable:
			w.arrayTable(e)
		}
	}
	if err := w.p.Error(); err != nil {
		var pe *unstable.ParserError
		at := pos{1, 1}
		msg := err.Error()
		if errors.As(err, &pe) {
			at = w.posOf(cap(data) - cap(pe.Highlight))
			msg = pe.Message
		}
		// A syntax error ends the walk: report it even after an
		// earlier problem, which may be its consequence.
		e := &Error{File: name, Line: at.line, Col: at.col, Msg: "syntax error: " + msg}
		if w.first != nil && w.first.at.before(at) {
			return w, w.errorOf(w.first)
		}
		return w, e
	}
	if w.first != nil {
		return w, w.errorOf(w.first)
	}
	return w, nil
}

func (w *walker) errorOf(is *issue) *Error {
	e := &Error{File: w.name, Line: is.at.line, Col: is.at.col, Field: is.field, Msg: is.msg}
	if is.rule >= 0 {
		w.ps.label(e, is.rule)
	}
	return e
}

func (w *walker) posOf(off int) pos {
	off = max(0, min(off, len(w.data)))
	i := sort.Search(len(w.lines), func(i int) bool { return w.lines[i] > off }) - 1
	return pos{i + 1, off - w.lines[i] + 1}
}

func (w *walker) nodePos(n *unstable.Node) pos {
	if n.Raw.Length == 0 && n.Raw.Offset == 0 {
		// Arrays carry no range: their first item's place will do.
		if c := n.Child(); c != nil {
			return w.nodePos(c)
		}
		return pos{}
	}
	return w.posOf(int(n.Raw.Offset))
}

func (w *walker) keys(n *unstable.Node) []keyPart {
	var ks []keyPart
	it := n.Key()
	for it.Next() {
		k := it.Node()
		ks = append(ks, keyPart{string(k.Data), w.posOf(int(k.Raw.Offset))})
	}
	return ks
}

// headerPos is the place of a table header's first "[".
func (w *walker) headerPos(n *unstable.Node) pos {
	it := n.Key()
	it.Next()
	off := int(it.Node().Raw.Offset)
	for off > 0 && (w.data[off-1] == ' ' || w.data[off-1] == '\t' || w.data[off-1] == '[') {
		off--
	}
	return w.posOf(off)
}

func (w *walker) report(at pos, rule int, field, format string, args ...any) {
	if w.first == nil {
		w.first = &issue{at, rule, field, fmt.Sprintf(format, args...)}
	}
}

func (w *walker) cur() int { return len(w.ps.rules) - 1 }

func (w *walker) newRule(at pos) {
	w.ps.rules = append(w.ps.rules, &rulePos{at: at, fields: map[string]*fieldPos{}})
	w.rules = append(w.rules, Rule{})
}

func (w *walker) arrayTable(e *unstable.Node) {
	ks := w.keys(e)
	w.ctx = ctxSkip
	switch {
	case ks[0].name == "redis":
		w.report(ks[0].at, -1, "redis", "write [redis], not [[redis]]: there is one store")
	case ks[0].name == "total":
		w.totalTable(e, ks)
	case ks[0].name != "rule":
		w.unknown(ks[0].at, -1, ks[0].name, topLevelNames)
	case len(ks) == 1:
		if w.ruleForm == 2 {
			w.report(ks[0].at, -1, "rule", "defined twice: rule = [ ... ] cannot be extended by [[rule]] tables")
			return
		}
		w.ruleForm = 1
		w.newRule(w.headerPos(e))
		w.ctx = ctxRule
	case len(w.ps.rules) == 0:
		w.report(ks[0].at, -1, "", "[[%s]] before any [[rule]]", joinKeys(ks))
	case ks[1].name == "match" && len(ks) == 2:
		w.report(ks[1].at, w.cur(), "match", "write [rule.match] or match = { ... }, not [[rule.match]]")
	default:
		w.subTable(ks)
	}
}

func (w *walker) table(e *unstable.Node) {
	ks := w.keys(e)
	w.ctx = ctxSkip
	switch {
	case ks[0].name == "redis":
		if len(ks) > 1 {
			w.redisKV(ks[1:], nil)
			return
		}
		if w.ps.redis != nil {
			w.dup(ks[0].at, -1, "redis", &fieldPos{key: w.ps.redis.at})
			return
		}
		w.ps.redis = &rulePos{at: w.headerPos(e), fields: map[string]*fieldPos{}}
		w.redis = &Redis{}
		w.ctx = ctxRedis
	case ks[0].name == "total":
		w.report(ks[0].at, -1, "total", "write [[total]] for each total, not [total]")
	case ks[0].name != "rule":
		w.unknown(ks[0].at, -1, ks[0].name, topLevelNames)
	case len(ks) == 1:
		w.report(ks[0].at, -1, "rule", "write [[rule]] for each rule, not [rule]")
	case w.ruleForm == 2:
		w.report(ks[0].at, -1, "", "[%s]: rules written as rule = [ ... ] cannot be extended by tables", joinKeys(ks))
	case len(w.ps.rules) == 0:
		w.report(ks[0].at, -1, "", "[%s] before any [[rule]]", joinKeys(ks))
	case ks[1].name == "match" && len(ks) == 2:
		r := w.ps.rules[w.cur()]
		if r.matchBy != 0 {
			w.dup(ks[1].at, w.cur(), "match", r.fields["match"])
			return
		}
		r.matchBy = matchHeader
		r.fields["match"] = &fieldPos{key: ks[1].at, val: ks[1].at}
		w.ctx = ctxMatch
	default:
		w.subTable(ks)
	}
}

// subTable reports a [rule.X...] or [[rule.X...]] header other than
// [rule.match].
func (w *walker) subTable(ks []keyPart) {
	i := w.cur()
	if ks[1].name == "total" {
		w.ruleTotalTable(i, ks)
		return
	}
	if ks[1].name == "match" {
		if lookup(tMatch, ks[2].name) != nil {
			w.report(ks[2].at, i, "match."+ks[2].name, "not a table")
		} else {
			w.unknown(ks[2].at, i, "match."+ks[2].name, matchFieldNames)
		}
		return
	}
	if lookup(tRule, ks[1].name) != nil {
		w.report(ks[1].at, i, ks[1].name, "not a table")
		return
	}
	w.unknown(ks[1].at, i, ks[1].name, ruleFieldNames)
}

func joinKeys(ks []keyPart) string {
	s := make([]string, len(ks))
	for i, k := range ks {
		s[i] = keyText(k.name)
	}
	return strings.Join(s, ".")
}

func (w *walker) keyValue(e *unstable.Node) {
	ks := w.keys(e)
	v := e.Value()
	switch w.ctx {
	case ctxRoot:
		w.rootKV(ks, v)
	case ctxRule:
		w.ruleKV(w.cur(), ks, v)
	case ctxMatch:
		w.matchKV(w.cur(), ks, v)
	case ctxRedis:
		w.redisKV(ks, v)
	case ctxTotal:
		w.totalKV(ks, v)
	case ctxRuleTotal:
		w.ruleTotalKV(w.cur(), ks, v)
	}
}

// redisKV checks a key of the [redis] table (v nil: a [redis.KEY] table
// header) and records its place.
func (w *walker) redisKV(ks []keyPart, v *unstable.Node) {
	r := w.ps.redis
	k := ks[0]
	field := "redis." + k.name
	fd := lookup(tRedis, k.name)
	switch {
	case fd == nil:
		w.unknownRedis(k)
		return
	case len(ks) > 1 || v == nil:
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
		w.decode(fd, fd.inRedis(w.redis), v, -1, field)
	}
}

// rootRedis handles redis = { ... } and redis.KEY = ... at the top level.
func (w *walker) rootRedis(ks []keyPart, v *unstable.Node) {
	r := w.ps.redis
	if len(ks) == 1 {
		if r != nil {
			w.dup(ks[0].at, -1, "redis", &fieldPos{key: r.at})
			return
		}
		if v.Kind != unstable.InlineTable {
			w.report(w.nodePos(v), -1, "redis", "want a table, not %s", nodeKind(v.Kind))
			return
		}
		w.ps.redis = &rulePos{at: ks[0].at, fields: map[string]*fieldPos{}}
		w.redis = &Redis{}
		it := v.Children()
		for it.Next() {
			n := it.Node()
			w.redisKV(w.keys(n), n.Value())
		}
		return
	}
	if r == nil {
		w.ps.redis = &rulePos{at: ks[0].at, fields: map[string]*fieldPos{}, matchBy: matchDotted}
		w.redis = &Redis{}
	} else if r.matchBy != matchDotted {
		w.dup(ks[0].at, -1, "redis", &fieldPos{key: r.at})
		return
	}
	w.redisKV(ks[1:], v)
}

func (w *walker) rootKV(ks []keyPart, v *unstable.Node) {
	if ks[0].name == "redis" {
		w.rootRedis(ks, v)
		return
	}
	if ks[0].name == "total" {
		w.report(ks[0].at, -1, "total", "write a [[total]] table for each total")
		return
	}
	if ks[0].name != "rule" {
		w.unknown(ks[0].at, -1, ks[0].name, topLevelNames)
		return
	}
	if len(ks) > 1 || v.Kind != unstable.Array {
		w.report(ks[0].at, -1, "rule", "write a [[rule]] table for each rule")
		return
	}
	if w.ruleForm != 0 {
		w.report(ks[0].at, -1, "rule", "defined twice")
		return
	}
	w.ruleForm = 2
	it := v.Children()
	for it.Next() {
		c := it.Node()
		if c.Kind != unstable.InlineTable {
			w.report(w.nodePos(c), -1, "rule", "want tables ([[rule]] or { ... }), not %s", nodeKind(c.Kind))
			continue
		}
		w.newRule(w.nodePos(c))
		i := w.cur()
		kv := c.Children()
		for kv.Next() {
			n := kv.Node()
			w.ruleKV(i, w.keys(n), n.Value())
		}
	}
}

func (w *walker) ruleKV(i int, ks []keyPart, v *unstable.Node) {
	r := w.ps.rules[i]
	k := ks[0]
	if k.name == "match" {
		if len(ks) == 1 {
			if r.matchBy != 0 {
				w.dup(k.at, i, "match", r.fields["match"])
				return
			}
			r.matchBy = matchInline
			r.fields["match"] = &fieldPos{key: k.at, val: w.nodePos(v)}
			if v.Kind != unstable.InlineTable {
				w.report(w.nodePos(v), i, "match", "want a table, not %s", nodeKind(v.Kind))
				return
			}
			it := v.Children()
			for it.Next() {
				n := it.Node()
				w.matchKV(i, w.keys(n), n.Value())
			}
			return
		}
		if r.matchBy == matchInline || r.matchBy == matchHeader {
			w.dup(k.at, i, "match", r.fields["match"])
			return
		}
		if r.matchBy == 0 {
			r.matchBy = matchDotted
			r.fields["match"] = &fieldPos{key: k.at, val: k.at}
		}
		w.matchKV(i, ks[1:], v)
		return
	}
	if k.name == "total" && (len(ks) > 1 || v.Kind == unstable.InlineTable) {
		w.ruleTotal(i, ks, v)
		return
	}
	fd := lookup(tRule, k.name)
	if fd == nil {
		w.unknown(k.at, i, k.name, ruleFieldNames)
		return
	}
	if len(ks) > 1 {
		w.report(k.at, i, k.name, "not a table")
		return
	}
	if f := r.fields[k.name]; f != nil {
		w.dup(k.at, i, k.name, f)
		return
	}
	f := &fieldPos{key: k.at, val: w.nodePos(v)}
	r.fields[k.name] = f
	if k.name == "name" && v.Kind == unstable.String {
		r.name = string(v.Data)
	}
	if w.check(i, k.name, fd.kind, v, f) {
		w.decode(fd, fd.inRule(&w.rules[i]), v, i, k.name)
	}
}

func (w *walker) matchKV(i int, ks []keyPart, v *unstable.Node) {
	r := w.ps.rules[i]
	k := ks[0]
	field := "match." + k.name
	fd := lookup(tMatch, k.name)
	if fd == nil {
		w.unknown(k.at, i, field, matchFieldNames)
		return
	}
	if len(ks) > 1 {
		w.report(k.at, i, field, "not a table")
		return
	}
	if f := r.fields[field]; f != nil {
		w.dup(k.at, i, field, f)
		return
	}
	f := &fieldPos{key: k.at, val: w.nodePos(v)}
	r.fields[field] = f
	if w.check(i, field, fd.kind, v, f) {
		rr := &w.rules[i]
		if rr.Match == nil {
			rr.Match = &Match{}
		}
		w.decode(fd, fd.inMatch(rr.Match), v, i, field)
	}
}

// check reports a value of the wrong type and records list items' places.
func (w *walker) check(i int, field string, want kind, v *unstable.Node, f *fieldPos) bool {
	c := want.codec()
	if !c.list {
		if !c.accepts(v.Kind) {
			w.report(w.nodePos(v), i, field, "want %s, not %s", c.want, nodeKind(v.Kind))
			return false
		}
		return true
	}
	if v.Kind != unstable.Array {
		w.report(w.nodePos(v), i, field, "want %s, not %s", c.want, nodeKind(v.Kind))
		return false
	}
	ok := true
	f.val = f.key
	it := v.Children()
	for j := 1; it.Next(); j++ {
		n := it.Node()
		at := w.nodePos(n)
		f.items = append(f.items, at)
		if !c.accepts(n.Kind) {
			ok = false
			w.report(at, i, field, "want %s: item %d is %s", c.want, j, nodeKind(n.Kind))
		}
	}
	return ok
}

func (w *walker) dup(at pos, i int, field string, first *fieldPos) {
	if first != nil {
		w.report(at, i, field, "defined twice (first on line %d)", first.key.line)
		return
	}
	w.report(at, i, field, "defined twice")
}

// unknown reports an unknown field, suggesting a known one that is a typo
// away.
func (w *walker) unknown(at pos, i int, field string, known []string) {
	msg := "unknown field"
	if i < 0 {
		msg = "unknown field (a rule file holds [[rule]] tables, [[total]] tables and a [redis] table)"
	}
	prefix, name := "", field
	if i >= 0 && strings.HasPrefix(field, "match.") {
		prefix, name = "match.", field[len("match."):]
	}
	field = prefix + keyText(name)
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(name, k); d < bestD && d <= len(name)/2 {
			best, bestD = k, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	}
	w.report(at, i, field, "%s", msg)
}

// keyText writes a key as TOML would: bare if it can be, else quoted (so
// that an error stays on one line).
func keyText(k string) string {
	for i := 0; i < len(k); i++ {
		if c := k[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// editDistance is the Levenshtein distance, for short names.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
