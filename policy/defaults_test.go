package policy

import "testing"

// TestDefaultsFromSchema checks that WithDefaults fills in every field's
// typed default from the schema where the field is left out (a rule where
// every defIf holds), leaves implicit ones out, and keeps what is given.
func TestDefaultsFromSchema(t *testing.T) {
	pps := 10.0
	r := Rule{Name: "a", PPS: &pps, Key: "uid", Shape: ptr(true), Scope: "global"}
	d := r.WithDefaults()
	rd := (&Redis{Addrs: []string{"127.0.0.1:6379"}}).WithDefaults()
	for i := range schema {
		f := &schema[i]
		var p any
		switch {
		case f.table == tRule && f.given(f.inRule(&r)):
			continue // checked below
		case f.table == tRule:
			p = f.inRule(&d)
		case f.table == tRedis:
			p = f.inRedis(rd)
		default:
			continue
		}
		c := f.kind.codec()
		switch {
		case f.def == nil && f.defFrom == nil:
		case f.implicit:
			if c.given(p) {
				t.Errorf("%s: implicit default written: %s", f.path(), c.format(p))
			}
		case !c.given(p):
			t.Errorf("%s: default %s not filled in", f.path(), f.defaultDoc())
		case f.defFrom == nil && c.format(p) != defaultTOML(f):
			t.Errorf("%s = %s, want the schema's default %s", f.path(), c.format(p), defaultTOML(f))
		}
	}
	if *d.Shape != true || d.Scope != "global" || d.Key != "uid" {
		t.Errorf("given settings changed: shape %v, scope %q, key %q", *d.Shape, d.Scope, d.Key)
	}
	if *d.Burst != 5 {
		t.Errorf("burst %v, want 5 (computed from pps)", *d.Burst)
	}
	// Conditional defaults stay out where they do not apply.
	d = Rule{Name: "b", PPS: &pps}.WithDefaults()
	if d.MaxDelay != 0 || d.NoOwner != "" || d.GlobalSlack != nil {
		t.Errorf("conditional defaults applied to a plain rule: max-delay %v, no-owner %q, global-slack %v", d.MaxDelay, d.NoOwner, d.GlobalSlack)
	}
	if d = (Rule{Name: "c", Action: "accept"}).WithDefaults(); d.Key != "" || d.Mode != "" {
		t.Errorf("limit defaults applied to an accept rule: key %q, mode %q", d.Key, d.Mode)
	}
}

// defaultTOML is f's default as Format writes it (set on a zero value).
func defaultTOML(f *field) string {
	var r Rule
	var rd Redis
	p := any(nil)
	if f.table == tRule {
		p = f.inRule(&r)
	} else {
		p = f.inRedis(&rd)
	}
	c := f.kind.codec()
	c.set(p, f.def)
	return c.format(p)
}
