package divert

import (
	"strings"
	"testing"
)

// FuzzParseInForce feeds arbitrary listings and options to the parsers:
// no panic, and a rule read from a comment gives a comment that reads
// back the same.
func FuzzParseInForce(f *testing.F) {
	f.Add(iptablesS)
	f.Add(nftList)
	f.Add("packetshaper queue=0-1 proto=tcp dport=1:2 sport=3 src=::1")
	f.Fuzz(func(t *testing.T, s string) {
		ParseIptables(s, IPv4)
		ParseNft(s)
		FromOptions("0", strings.Fields(s))
		r, ok := ParseTag(s, Both)
		if !ok {
			return
		}
		// The comment rules.sh would write for r.
		c := "packetshaper queue=" + itoa(int(r.QueueLo)) + "-" + itoa(int(r.QueueHi)) + " family=" + r.Family
		if r.Proto != "" && !strings.ContainsAny(r.Proto, " \t\n\v\f\r\u0085\u00a0") {
			c += " proto=" + r.Proto
		}
		r2, ok := ParseTag(c, Both)
		if !ok || r2.QueueLo != r.QueueLo || r2.QueueHi != r.QueueHi {
			t.Fatalf("%q → %+v → %q → %+v %v", s, r, c, r2, ok)
		}
	})
}
