package policy

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
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
	if rd := f.Redis.WithDefaults(); rd != nil {
		fmt.Fprintf(bw, "\n# The store the global rules share.\n[redis]\n")
		addrs := make([]string, len(rd.Addrs))
		for i, a := range rd.Addrs {
			addrs[i] = quote(a)
		}
		fmt.Fprintf(bw, "addrs = [%s]\n", strings.Join(addrs, ", "))
		fmt.Fprintf(bw, "cluster = %t\n", *rd.Cluster)
		if rd.PasswordFile != "" {
			fmt.Fprintf(bw, "password-file = %s\n", quote(rd.PasswordFile))
		}
		fmt.Fprintf(bw, "timeout = %s\n", quote(formatDuration(rd.Timeout)))
		fmt.Fprintf(bw, "key-prefix = %s\n", quote(*rd.KeyPrefix))
		if rd.Username != "" {
			fmt.Fprintf(bw, "username = %s\n", quote(rd.Username))
		}
		if rd.TLS != nil {
			fmt.Fprintf(bw, "tls = %t\n", *rd.TLS)
		}
		for _, kv := range [][2]string{{"ca-file", rd.CAFile}, {"cert-file", rd.CertFile}, {"key-file", rd.KeyFile}, {"server-name", rd.ServerName}} {
			if kv[1] != "" {
				fmt.Fprintf(bw, "%s = %s\n", kv[0], quote(kv[1]))
			}
		}
	}
	for _, r := range f.Rules {
		d := r.WithDefaults()
		fmt.Fprintf(bw, "\n[[rule]]\n")
		kv := func(k, v, comment string) {
			fmt.Fprintf(bw, "%s = %s", k, v)
			if comment != "" {
				fmt.Fprintf(bw, " # %s", comment)
			}
			bw.WriteByte('\n')
		}
		kv("name", quote(d.Name), "")
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
			if len(inline) <= 100 {
				kv("match", inline, "")
			}
		} else {
			bw.WriteString("# no match table: every packet\n")
		}
		kv("action", quote(d.Action), "")
		if d.Action == "limit" {
			kv("mode", quote(d.Mode), "")
			kv("on-exceed", quote(d.OnExceed), "")
			if d.SetMark != "" {
				kv("set-mark", quote(d.SetMark), "")
			}
			if d.PPS != nil {
				kv("pps", formatFloat(*d.PPS), "")
			} else {
				kv("bitrate", quote(d.Bitrate), "")
			}
			unused := func(used bool) string {
				if used {
					return ""
				}
				return "unused by " + d.Algo
			}
			tb := d.Algo == DefaultAlgo || d.Algo == ShapeAlgo
			if d.Burst != nil {
				unit := "packets"
				if d.PPS == nil {
					unit = "bytes"
				}
				c := unused(tb)
				if c == "" {
					c = unit
				}
				kv("burst", formatFloat(*d.Burst), c)
			}
			kv("algo", quote(d.Algo), "")
			kv("shape", strconv.FormatBool(*d.Shape), "")
			if *d.Shape {
				kv("max-delay", quote(formatDuration(d.MaxDelay)), "")
			}
			kv("window", quote(formatDuration(d.Window)), unused(!tb))
			kv("key", quote(d.Key), "")
			kv("src-prefix4", strconv.Itoa(*d.SrcPrefix4), "")
			kv("dst-prefix4", strconv.Itoa(*d.DstPrefix4), "")
			kv("src-prefix6", strconv.Itoa(*d.SrcPrefix6), "")
			kv("dst-prefix6", strconv.Itoa(*d.DstPrefix6), "")
			kv("symmetric", strconv.FormatBool(*d.Symmetric), "")
			kv("max-flows", strconv.Itoa(*d.MaxFlows), "")
			kv("flow-timeout", quote(formatDuration(d.FlowTimeout)), "")
			kv("scope", quote(d.Scope), "")
			if d.GlobalSlack != nil {
				kv("global-slack", formatFloat(*d.GlobalSlack), "fraction of the rate × 1 s all hosts may hold in leases")
			}
		}
		if len(inline) > 100 {
			bw.WriteString("\n[rule.match]\n")
			for _, it := range match {
				kv(it.key, it.value(true), "")
			}
		}
	}
	return bw.Flush()
}

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
	strs := func(key string, vs []string) {
		if vs == nil {
			return
		}
		it := matchItem{key: key, items: make([]string, len(vs))}
		for i, v := range vs {
			it.items[i] = quote(v)
		}
		out = append(out, it)
	}
	if m.Family != "" {
		out = append(out, matchItem{key: "family", scalar: quote(m.Family)})
	}
	strs("src", m.Src)
	strs("dst", m.Dst)
	strs("proto", m.Proto)
	strs("sport", m.Sport)
	strs("dport", m.Dport)
	strs("iif", m.Iif)
	strs("oif", m.Oif)
	if m.Mark != "" {
		out = append(out, matchItem{key: "mark", scalar: quote(m.Mark)})
	}
	if m.Queue != nil {
		it := matchItem{key: "queue", items: make([]string, len(m.Queue))}
		for i, q := range m.Queue {
			it.items[i] = strconv.Itoa(q)
		}
		out = append(out, it)
	}
	return out
}

// formatFloat writes v so that TOML reads it back exactly.
func formatFloat(v float64) string {
	return strconv.FormatFloat(v, 'g', -1, 64)
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
