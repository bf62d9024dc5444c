package control

import (
	"reflect"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/internal/failopen"
)

// TestTagsAreCountNames: the JSON keys of status and the flow listing that
// name a counter are the names the stats line, the metrics and replay
// use, declared in countname and failopen (a struct tag cannot take the
// constant, so it spells it: this holds the spelling).
func TestTagsAreCountNames(t *testing.T) {
	for _, c := range []struct {
		typ   reflect.Type
		field string
		name  string
	}{
		{reflect.TypeFor[Flow](), "ShadowDropped", countname.ShadowDropped},
		{reflect.TypeFor[Rule](), "ShadowDropped", countname.ShadowDropped},
		{reflect.TypeFor[Queue](), "FailOpenPassed", failopen.KeyPassed},
		{reflect.TypeFor[Queue](), "FailOpenSecs", failopen.KeySecs},
		{reflect.TypeFor[Queue](), "FailOpenExact", failopen.KeyExact},
	} {
		f, ok := c.typ.FieldByName(c.field)
		if !ok {
			t.Errorf("%s has no field %s", c.typ, c.field)
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != c.name {
			t.Errorf("%s.%s is %q in JSON, the counter is %q", c.typ.Name(), c.field, name, c.name)
		}
	}
}
