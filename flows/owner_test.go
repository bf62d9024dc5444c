package flows

import (
	"testing"
)

// TestOwnerModes: keys by the packet's owner (uid, gid, mark), alone or with
// an address part, for people and as flows.
func TestOwnerModes(t *testing.T) {
	p4, p6 := keyPackets(t)
	type own struct {
		mark, uid, gid uint32
		known          bool
	}
	tests := []struct {
		mode string
		c    KeyConfig
		p    *Packet
		o    own
		want string
	}{
		{"uid", KeyConfig{}, &p4, own{uid: 1001, gid: 100, known: true}, "uid 1001"},
		{"uid", KeyConfig{}, &p4, own{uid: 0, known: true}, "uid 0"},
		{"uid", KeyConfig{}, &p4, own{uid: 1001}, "no owner"},
		{"gid", KeyConfig{}, &p6, own{uid: 1001, gid: 100, known: true}, "gid 100"},
		{"mark", KeyConfig{}, &p4, own{mark: 0x1234}, "mark 0x1234"},
		{"mark", KeyConfig{MarkMask: 0xff00}, &p4, own{mark: 0x1234}, "mark 0x1200"},
		{"uid+dst", KeyConfig{}, &p4, own{uid: 4294967294, known: true}, "uid 4294967294 dst 10.9.8.7"},
		{"dst+uid", KeyConfig{}, &p4, own{}, "no owner dst 10.9.8.7"},
		{"mark+src", KeyConfig{SrcPrefix4: 24}, &p4, own{mark: 7}, "mark 0x7 src 10.1.2.0"},
		{"gid+src-dst", KeyConfig{}, &p6, own{gid: 5, known: true}, "gid 5 2001:db8:1:2:aaaa::1 > 2001:db8:9:9::2"},
	}
	for _, tt := range tests {
		m, err := ParseMode(tt.mode)
		if err != nil {
			t.Fatalf("ParseMode(%q): %v", tt.mode, err)
		}
		c := tt.c
		c.Mode = m
		if err := c.Validate(); err != nil {
			t.Fatalf("%q: Validate: %v", tt.mode, err)
		}
		var k Key
		c.KeyTo(&k, tt.p)
		c.SetOwner(&k, tt.o.mark, tt.o.uid, tt.o.gid, tt.o.known)
		if got := k.String(); got != tt.want {
			t.Errorf("%q %+v: key %q, want %q", tt.mode, tt.o, got, tt.want)
		}
		if m.Addr() != NoAddr && (c.SrcPrefix4 != 0) {
			if got, want := c.Format(k), "mark 0x7 src 10.1.2.0/24"; got != want {
				t.Errorf("%q: Format %q, want %q", tt.mode, got, want)
			}
		}
	}

	// One user is one flow whatever the family, port or address with
	// key = "uid"; another user, or no owner, is another flow.
	c := KeyConfig{Mode: ByUID | NoAddr}
	key := func(p *Packet, uid uint32, known bool) Key {
		var k Key
		c.KeyTo(&k, p)
		c.SetOwner(&k, 0, uid, 0, known)
		return k
	}
	if a, b := key(&p4, 1001, true), key(&p6, 1001, true); !a.equal(&b) || a != b {
		t.Errorf("uid 1001 over IPv4 and IPv6: two flows %v, %v", a, b)
	}
	for _, o := range []Key{key(&p4, 1002, true), key(&p4, 0, false), key(&p4, 0, true)} {
		if a := key(&p4, 1001, true); a.equal(&o) || a == o {
			t.Errorf("uid 1001 and %v: one flow", o)
		}
	}
	if a, b := key(&p4, 0, true), key(&p4, 0, false); a.equal(&b) {
		t.Error("uid 0 and no owner: one flow")
	}
	// An address mode's key does not move with the owner.
	var a, b Key
	ac := KeyConfig{Mode: Dst}
	ac.KeyTo(&a, &p4)
	ac.KeyTo(&b, &p4)
	ac.SetOwner(&b, 5, 6, 7, true)
	if a != b {
		t.Errorf("dst key changed by SetOwner: %v, %v", a, b)
	}
}

func TestParseOwnerModes(t *testing.T) {
	for _, s := range []string{"uid", "gid", "mark", "uid+src", "uid+dst", "uid+src-dst", "gid+dst", "mark+src-dst"} {
		m, err := ParseMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v (%q), %v", s, m, m.String(), err)
		}
	}
	for _, s := range []string{"uid+5tuple", "5tuple+mark", "uid+gid", "src+dst", "uid+", "+uid", "uid+dst+src", "user", "uid+srcip"} {
		if m, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q) = %v, want an error", s, m)
		}
	}
	if err := (&KeyConfig{Mode: Dst, MarkMask: 0xff}).Validate(); err == nil {
		t.Error("a mark mask on a dst key: no error")
	}
	for _, m := range []Mode{NoAddr, ByUID, ByMark | FiveTuple, 4 << 4, 5} {
		if err := (&KeyConfig{Mode: m}).Validate(); err == nil {
			t.Errorf("mode %d: no error", m)
		}
	}
}

// FuzzParseMode: ParseMode never panics, and a mode it returns is valid and
// reads back from its String.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"5tuple", "src", "uid", "mark+src-dst", "dst+gid", "uid+5tuple", "+", "uid+uid"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if err != nil {
			return
		}
		if !m.valid() {
			t.Fatalf("ParseMode(%q) = invalid mode %d", s, m)
		}
		if back, err := ParseMode(m.String()); err != nil || back != m {
			t.Fatalf("ParseMode(%q) = %v; its String %q reads back as %v, %v", s, m, m.String(), back, err)
		}
	})
}
