package control

import (
	"reflect"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/internal/countname"
	"github.com/packetshaper/packetshaper/internal/failopen"
)

// TestTagsAreCountNames: the JSON keys of status and the flow listing that
// name a counter (every uint64 field) are the names the stats line, the metrics and replay
// use, declared in countname and failopen (a struct tag cannot take the
// constant, so it spells it: this holds the spelling).
func TestTagsAreCountNames(t *testing.T) {
	rows := []struct {
		typ   reflect.Type
		field string
		name  string
	}{
		{reflect.TypeFor[Flow](), "Packets", countname.Packets},
		{reflect.TypeFor[Flow](), "Accepted", countname.Accepted},
		{reflect.TypeFor[Flow](), "Dropped", countname.Dropped},
		{reflect.TypeFor[Flow](), "ShadowDropped", countname.ShadowDropped},
		{reflect.TypeFor[Flow](), "Marked", countname.Marked},
		{reflect.TypeFor[Rule](), "Packets", countname.Packets},
		{reflect.TypeFor[Rule](), "Accepted", countname.Accepted},
		{reflect.TypeFor[Rule](), "Dropped", countname.Dropped},
		{reflect.TypeFor[Rule](), "ShadowDropped", countname.ShadowDropped},
		{reflect.TypeFor[Rule](), "Marked", countname.Marked},
		{reflect.TypeFor[Rule](), "Flows", countname.Flows},
		{reflect.TypeFor[Rule](), "Evictions", countname.Evictions},
		{reflect.TypeFor[Rule](), "Expired", countname.Expired},
		{reflect.TypeFor[Queue](), "Queued", countname.Queued},
		{reflect.TypeFor[Queue](), "Packets", countname.Packets},
		{reflect.TypeFor[Queue](), "Accepted", countname.Accepted},
		{reflect.TypeFor[Queue](), "Dropped", countname.Dropped},
		{reflect.TypeFor[Queue](), "QueueDrops", countname.QueueDrops},
		{reflect.TypeFor[Queue](), "SocketDrops", countname.SocketDrops},
		{reflect.TypeFor[Queue](), "Lost", countname.Lost},
		{reflect.TypeFor[Queue](), "Errors", countname.Errors},
		{reflect.TypeFor[Queue](), "Malformed", countname.Malformed},
		{reflect.TypeFor[Queue](), "Unmatched", countname.Unmatched},
		{reflect.TypeFor[Queue](), "Flows", countname.Flows},
		{reflect.TypeFor[Queue](), "FailOpenPassed", failopen.KeyPassed},
		{reflect.TypeFor[Queue](), "FailOpenSecs", failopen.KeySecs},
		{reflect.TypeFor[Queue](), "FailOpenExact", failopen.KeyExact},
	}
	// Every counter (a uint64) of the three is in the table.
	listed := map[string]bool{}
	for _, c := range rows {
		listed[c.typ.Name()+"."+c.field] = true
	}
	for _, typ := range []reflect.Type{reflect.TypeFor[Flow](), reflect.TypeFor[Rule](), reflect.TypeFor[Queue]()} {
		for i := range typ.NumField() {
			if f := typ.Field(i); f.Type.Kind() == reflect.Uint64 && !listed[typ.Name()+"."+f.Name] {
				t.Errorf("%s.%s is a counter not held to a countname name here", typ.Name(), f.Name)
			}
		}
	}
	for _, c := range rows {
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
