package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
)

// divertPolicy limits UDP to port 53 (5/s, burst 2) and to port 9000
// (1000/s, burst 100) per flow.
var divertPolicy = udpRule("dns", "53", 5, 2) + udpRule("app", "9000", 1000, 100)

// TestDivertRulesFromPolicy: with rules.sh's rule for udp/9000 in force,
// packetshaper check warns that the dns rule (udp/53) can never see a
// packet, and indeed it sees none of the datagrams sent to port 53; after
// rules.sh add --policy (the divert rules packetshaper divert prints for
// the file), check says nothing and the dns rule sees, and limits, every
// datagram sent to port 53.
func TestDivertRulesFromPolicy(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newShapedTopo(t, divertPolicy)
	pol, sock := tp.Policy, tp.Sock

	check := func() string {
		t.Helper()
		out, err := tp.run(tp.B, shaperBin, "check", pol)
		if err != nil {
			t.Fatalf("check: %v\n%s", err, out)
		}
		return out
	}
	const warning = `packetshaper check: warning: rule "dns" can never see a packet: it matches udp dport 53, but only ipv4 udp dport 9000 to queue 0 is diverted by the rules in force (iptables -S)`
	if out := check(); !strings.Contains(out, warning) || strings.Contains(out, `rule "app" can never`) {
		t.Errorf("check with udp/9000 diverted: want the dns warning, none about app:\n%s", out)
	}

	tp.startShaped()
	status := func() map[string]control.Rule {
		t.Helper()
		out := tp.must(tp.B, shaperBin, "status", "--control-socket", sock, "--json")
		var st control.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v\n%s", err, out)
		}
		rs := map[string]control.Rule{}
		for _, r := range st.Rules {
			rs[r.Name] = r
		}
		return rs
	}
	// send sends 40 datagrams to each of ports 53 and 9000 and returns
	// what the receiver got on 53, once the rules' counters have caught
	// up with app's share (every datagram to 9000 is diverted).
	var appBefore uint64
	send := func() (sent, got53 uint64, rules map[string]control.Rule) {
		t.Helper()
		rc := tp.startRecv(":53,:9000", "--duration", "30s", "--idle", "2s")
		s := tp.send("--dst", tp.IPB+":53,"+tp.IPB+":9000", "--flows", "1", "--sport", "30000", "--pps", "100", "--count", "40", "--duration", "20s")
		r := recvDone(rc, 35*time.Second)
		if s.Sent != 80 {
			t.Fatalf("psend sent %d datagrams, want 80", s.Sent)
		}
		testutil.Eventually(t, 10*time.Second, func() bool {
			rules = status()
			return rules["app"].Packets == appBefore+40
		}, "the app rule's packets: %d, want %d", rules["app"].Packets, appBefore+40)
		appBefore = rules["app"].Packets
		return 40, r.Received["53"]["30000"], rules
	}
	sent, got, rules := send()
	if got != sent || rules["dns"].Packets != 0 {
		t.Errorf("udp/53 not diverted: received %d of %d, the dns rule saw %d packets; want all received, none seen", got, sent, rules["dns"].Packets)
	}

	// The divert rules from the policy.
	out := tp.rulesPolicy(pol)
	for _, want := range []string{"packetshaper queue=0 proto=udp dport=53", "packetshaper queue=0 proto=udp dport=9000"} {
		if !strings.Contains(out, want) {
			t.Errorf("rules.sh add --policy: no rule tagged %q:\n%s", want, out)
		}
	}
	if out := check(); strings.Contains(out, "can never see a packet") {
		t.Errorf("check after rules.sh add --policy: %s", out)
	}
	sent, got, rules = send()
	dns := rules["dns"]
	t.Logf("udp/53 diverted by the policy's rules: the dns rule saw %d of %d datagrams, accepted %d, dropped %d; received %d", dns.Packets, sent, dns.Accepted, dns.Dropped, got)
	// 40 datagrams at 100/s against 5/s, burst 2: at most 2 + 5 × 0.4 s
	// (and a margin for a slow sender) pass.
	if dns.Packets != sent || dns.Accepted != got || dns.Dropped != sent-got || got < 2 || got > 10 {
		t.Errorf("udp/53 diverted: received %d of %d; the dns rule: %d packets, %d accepted, %d dropped; want every packet seen, 2..10 accepted", got, sent, dns.Packets, dns.Accepted, dns.Dropped)
	}
}
