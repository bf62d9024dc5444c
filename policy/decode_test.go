package policy

import "testing"

// TestDecodeNumbers checks the one-pass decode reads TOML's integer and
// float forms as the TOML spec does.
func TestDecodeNumbers(t *testing.T) {
	in := `[[rule]]
name = "a"
pps = 1_000.5e1
burst = 0x10
max-flows = 0o17_7
src-prefix4 = 0b11000
dst-prefix4 = +24
match = { proto = [6, "udp"], dport = [0x16, "80"], queue = [1_0] }

[[rule]]
name = "b"
pps = 2
burst = 3
`
	f, err := Parse("n.toml", []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	r := f.Rules[0]
	if *r.PPS != 10005 || *r.Burst != 16 || *r.MaxFlows != 127 || *r.SrcPrefix4 != 24 || *r.DstPrefix4 != 24 {
		t.Errorf("numbers: pps %v burst %v max-flows %v src-prefix4 %v dst-prefix4 %v", *r.PPS, *r.Burst, *r.MaxFlows, *r.SrcPrefix4, *r.DstPrefix4)
	}
	m := r.Match
	if len(m.Proto) != 2 || m.Proto[0] != "6" || m.Proto[1] != "udp" || m.Dport[0] != "22" || m.Dport[1] != "80" || m.Queue[0] != 10 {
		t.Errorf("match: %+v", m)
	}
	if b := f.Rules[1]; *b.PPS != 2 || *b.Burst != 3 {
		t.Errorf("integers as numbers: pps %v burst %v", *b.PPS, *b.Burst)
	}
}
