package offload

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/packetshaper/packetshaper/flows"
)

func key(proto uint8, src, dst string, sport, dport uint16) flows.Key {
	s, d := netip.MustParseAddr(src), netip.MustParseAddr(dst)
	k := flows.Key{Proto: proto, SrcPort: sport, DstPort: dport, Family: 4}
	if s.Is6() {
		k.Family = 6
	}
	s16, d16 := s.As16(), d.As16()
	if k.Family == 4 {
		s4, d4 := s.As4(), d.As4()
		copy(s16[:], s4[:])
		copy(d16[:], d4[:])
		clear(s16[4:])
		clear(d16[4:])
	}
	k.Src, k.Dst = s16, d16
	return k
}

func TestEncodeKey(t *testing.T) {
	v6a := netip.MustParseAddr("2001:db8::1").As16()
	v6b := netip.MustParseAddr("2001:db8::2").As16()
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for _, c := range []struct {
		name string
		k    flows.Key
		set  int
		want []byte
	}{
		{"udp4", key(flows.ProtoUDP, "10.0.0.1", "10.0.0.2", 5000, 9999), setPorts4, []byte{
			10, 0, 0, 1, 10, 0, 0, 2,
			17, 0, 0, 0, // inet_proto, padded to 4 bytes
			0x13, 0x88, 0, 0, // 5000, network byte order, padded
			0x27, 0x0f, 0, 0, // 9999
		}},
		{"tcp4 high ports", key(flows.ProtoTCP, "192.0.2.1", "198.51.100.7", 65535, 1), setPorts4, []byte{
			192, 0, 2, 1, 198, 51, 100, 7, 6, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0,
		}},
		{"sctp6", key(flows.ProtoSCTP, "2001:db8::1", "2001:db8::2", 0x0102, 0x0304), setPorts6, cat(
			v6a[:], v6b[:], []byte{132, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0})},
		{"udplite6", key(flows.ProtoUDPLite, "2001:db8::2", "2001:db8::1", 1, 2), setPorts6, cat(
			v6b[:], v6a[:], []byte{136, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0})},
		{"gre4", key(47, "10.0.0.1", "10.0.0.2", 0, 0), setNoPorts4, []byte{10, 0, 0, 1, 10, 0, 0, 2, 47, 0, 0, 0}},
		{"esp6", key(50, "2001:db8::1", "2001:db8::2", 0, 0), setNoPorts6, cat(v6a[:], v6b[:], []byte{50, 0, 0, 0})},
	} {
		var b [maxKeyLen]byte
		for i := range b {
			b[i] = 0xaa // encodeKey must clear what it does not write
		}
		set, n, ok := encodeKey(&c.k, &b)
		if !ok || set != c.set || !bytes.Equal(b[:n], c.want) {
			t.Errorf("%s: encodeKey(%v) = set %s, % x, %v; want set %s, % x", c.name, c.k, setNames[set], b[:n], ok, setNames[c.set], c.want)
		}
		if n != keyLens[set] {
			t.Errorf("%s: key length %d, but set %s has keys of %d bytes", c.name, n, setNames[set], keyLens[set])
		}
	}
}

func TestEncodeKeyRejects(t *testing.T) {
	srcMode := key(flows.ProtoUDP, "10.0.0.1", "10.0.0.2", 1, 2)
	srcMode.Mode = flows.Src
	noFamily := key(flows.ProtoUDP, "10.0.0.1", "10.0.0.2", 1, 2)
	noFamily.Family = 0
	for _, c := range []struct {
		name string
		k    flows.Key
	}{
		{"icmp", key(flows.ProtoICMP, "10.0.0.1", "10.0.0.2", 8, 0)},
		{"icmpv6", key(flows.ProtoICMPv6, "2001:db8::1", "2001:db8::2", 128, 0)},
		{"mode src", srcMode},
		{"family 0", noFamily},
		{"zero key", flows.Key{}},
		{"ports on gre", key(47, "10.0.0.1", "10.0.0.2", 1, 2)},
	} {
		var b [maxKeyLen]byte
		if set, n, ok := encodeKey(&c.k, &b); ok {
			t.Errorf("%s: encodeKey(%v) = set %s, %d bytes, ok; want rejected", c.name, c.k, setNames[set], n)
		}
	}
}

// TestKeyMatchesEngine checks that the keys the engine reports (an exact
// KeyConfig over a decoded packet) encode as the tuple the kernel reads.
func TestKeyMatchesEngine(t *testing.T) {
	var exact flows.KeyConfig
	p := flows.Packet{Class: flows.IPv4, Proto: flows.ProtoUDP, SrcPort: 40000, DstPort: 53}
	copy(p.Src[:], []byte{127, 0, 0, 1})
	copy(p.Dst[:], []byte{127, 0, 0, 2})
	k := exact.Key(&p)
	var b [maxKeyLen]byte
	set, n, ok := encodeKey(&k, &b)
	want := []byte{127, 0, 0, 1, 127, 0, 0, 2, 17, 0, 0, 0, 0x9c, 0x40, 0, 0, 0, 53, 0, 0}
	if !ok || set != setPorts4 || !bytes.Equal(b[:n], want) {
		t.Errorf("engine key %v encodes as set %s % x (ok %v), want ports4 % x", k, setNames[set], b[:n], ok, want)
	}
}

// TestRulesScriptAgrees checks that scripts/rules.sh creates the table and
// sets this package expects (--dry-run needs no root and changes nothing).
func TestRulesScriptAgrees(t *testing.T) {
	out, err := exec.Command("bash", "../../scripts/rules.sh", "add", "--dry-run", "--queue", "0", "--offload").CombinedOutput()
	if err != nil {
		t.Fatalf("rules.sh add --dry-run --offload: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, "add table inet "+DefaultTable+"\n") {
		t.Errorf("rules.sh does not add table inet %s:\n%s", DefaultTable, s)
	}
	for i, n := range setNames {
		want := "add set inet " + DefaultTable + " " + n + " { type " + setTypes[i] + "; flags dynamic,timeout; timeout " + fmt.Sprint(MaxTimeout) + ";"
		if !strings.Contains(s, want) {
			t.Errorf("rules.sh does not add %q:\n%s", want, s)
		}
		if !regexp.MustCompile(" @" + n + " add @" + n + ` \{ [^}]* limit rate over 4000000000/second \} counter drop`).MatchString(s) {
			t.Errorf("rules.sh adds no limit rule on @%s (no --proto: every set):\n%s", n, s)
		}
	}
	src, err := os.ReadFile("../../scripts/rules.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(src), "\nOFF_TABLE="+DefaultTable+"\n") {
		t.Errorf("scripts/rules.sh has no OFF_TABLE=%s", DefaultTable)
	}
}
