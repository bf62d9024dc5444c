package policy

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Format writes f as TOML that Parse reads back to f.WithDefaults(): each
// rule with every default filled in (what `packetshaper check FILE`
// prints). Settings that the rule's algorithm ignores are written too, with
// a comment saying so. A match table too long for one line becomes a
// [rule.match] table.
func (f *File) Format(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, "# %d rule%s, tried in order: the first that matches a packet decides;\n", len(f.Rules), plural(len(f.Rules)))
	fmt.Fprintf(bw, "# a packet no rule matches is accepted. Defaults are filled in.\n")
	kv := func(k, v, comment string) {
		fmt.Fprintf(bw, "%s = %s", k, v)
		if comment != "" {
			fmt.Fprintf(bw, " # %s", comment)
		}
		bw.WriteByte('\n')
	}
	if rd := f.Redis.WithDefaults(); rd != nil {
		fmt.Fprintf(bw, "\n# The store the global rules share.\n[redis]\n")
		for i := range schema {
			if fd := &schema[i]; fd.table == tRedis {
				if v, ok := fd.formatValue(fd.inRedis(rd)); ok {
					kv(fd.name, v, "")
				}
			}
		}
	}
	for i := range f.Totals {
		t := f.Totals[i]
		if t.Algo == "" {
			t.Algo = DefaultAlgo
		}
		fmt.Fprintf(bw, "\n# A limit on what the rules that name it pass together.\n[[total]]\n")
		for j := range schema {
			if fd := &schema[j]; fd.table == tTotal {
				if v, ok := fd.formatValue(fd.inTotal(&t)); ok {
					kv(fd.name, v, "")
				}
			}
		}
	}
	for _, r := range f.Rules {
		d := r.WithDefaults()
		fmt.Fprintf(bw, "\n[[rule]]\n")
		var match []matchItem
		if d.Match != nil {
			match = matchItems(d.Match)
		}
		inline := ""
		if len(match) > 0 {
			parts := make([]string, len(match))
			for i, it := range match {
				parts[i] = it.key + " = " + it.value(false)
			}
			inline = "{ " + strings.Join(parts, ", ") + " }"
		}
		for i := range schema {
			fd := &schema[i]
			if fd.table != tRule || fd.limit && d.Action != DefaultAction {
				continue
			}
			p := fd.inRule(&d)
			if _, ok := p.(**Match); ok {
				switch {
				case len(match) == 0:
					bw.WriteString("# no match table: every packet\n")
				case len(inline) <= 100:
					kv(fd.name, inline, "")
				}
				continue
			}
			if v, ok := fd.formatValue(p); ok {
				c := ""
				if fd.comment != nil {
					c = fd.comment(&d)
				}
				kv(fd.name, v, c)
			}
		}
		if len(inline) > 100 {
			bw.WriteString("\n[rule.match]\n")
			for _, it := range match {
				kv(it.key, it.value(true), "")
			}
		}
		if d.OwnTotal != nil && d.Action == DefaultAction {
			bw.WriteString("\n[rule.total]\n")
			for j := range schema {
				if fd := &schema[j]; fd.table == tTotal {
					if v, ok := fd.formatValue(fd.inTotal(d.OwnTotal)); ok {
						kv(fd.name, v, "")
					}
				}
			}
		}
	}
	return bw.Flush()
}

// formatValue writes the field p points at (from f's inRule, inMatch or
// inRedis) as TOML, or reports it is not set.
func (f *field) formatValue(p any) (string, bool) {
	c := f.kind.codec()
	if !c.given(p) || c.format == nil {
		return "", false
	}
	return c.format(p), true
}

// burstComment is the unit of a rule's burst, or that its algorithm
// ignores it.
func burstComment(d *Rule) string {
	if !tokenBucket(d) {
		return "unused by " + d.Algo
	}
	if d.PPS == nil {
		return "bytes"
	}
	return "packets"
}

// windowComment says that a token bucket ignores the window.
func windowComment(d *Rule) string {
	if tokenBucket(d) {
		return "unused by " + d.Algo
	}
	return ""
}

func tokenBucket(d *Rule) bool { return d.Algo == DefaultAlgo || d.Algo == ShapeAlgo }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// matchItem is one field of a match table, formatted.
type matchItem struct {
	key    string
	items  []string // list
	scalar string   // or a single string
}

func (it matchItem) value(long bool) string {
	if it.items == nil {
		return it.scalar
	}
	if !long || len(it.items) <= 8 {
		return "[" + strings.Join(it.items, ", ") + "]"
	}
	return "[\n  " + strings.Join(it.items, ",\n  ") + ",\n]"
}

func matchItems(m *Match) []matchItem {
	var out []matchItem
	for i := range schema {
		fd := &schema[i]
		if fd.table != tMatch {
			continue
		}
		p := fd.inMatch(m)
		if !fd.given(p) {
			continue
		}
		it := matchItem{key: fd.name}
		if c := fd.kind.codec(); c.list {
			it.items = c.items(p)
		} else {
			it.scalar = c.format(p)
		}
		out = append(out, it)
	}
	return out
}

// quote writes s as a TOML basic string.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == utf8.RuneError && n == 1:
			// Not UTF-8: TOML cannot hold the byte; write U+FFFD.
			b.WriteString(`\uFFFD`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	b.WriteByte('"')
	return b.String()
}
