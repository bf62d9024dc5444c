package daemon

import (
	"log/slog"
)

// lineValues flattens a stats line's attributes: "packets", "rule.a.dropped".
func lineValues(attrs []any) map[string]any {
	m := map[string]any{}
	var walk func(prefix string, as []slog.Attr)
	walk = func(prefix string, as []slog.Attr) {
		for _, a := range as {
			if a.Value.Kind() == slog.KindGroup {
				walk(prefix+a.Key+".", a.Value.Group())
				continue
			}
			m[prefix+a.Key] = a.Value.Any()
		}
	}
	r := slog.Record{}
	r.Add(attrs...)
	var as []slog.Attr
	r.Attrs(func(a slog.Attr) bool { as = append(as, a); return true })
	walk("", as)
	return m
}
