package daemon

import (
	"reflect"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/control"
)

// TestStatusKeysAreCounterKeys: a counter shown by status is named in
// status's JSON (control.Queue's or control.Rule's tag, which cannot take
// a constant) as in the stats line (its Key): one name, spelled twice,
// held here.
func TestStatusKeysAreCounterKeys(t *testing.T) {
	// tagOf is the JSON name of the field of *s (a struct) at p.
	tagOf := func(s any, p *uint64) string {
		v := reflect.ValueOf(s).Elem()
		for i := range v.NumField() {
			if v.Field(i).Addr().Pointer() == reflect.ValueOf(p).Pointer() && v.Field(i).Type() == reflect.TypeFor[uint64]() {
				name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
				return name
			}
		}
		t.Fatalf("%T has no field at %p", s, p)
		return ""
	}
	n := 0
	for _, c := range counters {
		var name string
		switch {
		case c.queueField != nil:
			var q control.Queue
			name = tagOf(&q, c.queueField(&q))
		case c.ruleField != nil:
			var r control.Rule
			name = tagOf(&r, c.ruleField(&r))
		default:
			continue
		}
		n++
		if name != c.Key {
			t.Errorf("counter %s (%s) is %q in status's JSON", c.Key, c.Metric, name)
		}
	}
	if n == 0 {
		t.Error("no counter fills status")
	}
}
