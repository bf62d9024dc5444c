package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestTCPAndPing: with a limit far above the traffic, a TCP transfer and
// ping work through packetshaper over IPv4 and IPv6, and the packets really
// went through the queue.
func TestTCPAndPing(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	// Everything B receives, both families, goes to the queue.
	tp.rules("add", "--queue", "0")
	sh := tp.startShaper("--queue", "0", "--pps", "1000000", "--burst", "1000000")
	before := tp.queue(0).IDSequence

	const nbytes = 8 << 20
	for i, dst := range []string{tp.IPB, "[" + tp.IP6B + "]"} {
		port := fmt.Sprint(9100 + i)
		srv := tp.start(tp.B, "psend tcp-serve", psendBin, "tcp-serve", "--listen", ":"+port, "--duration", "20s")
		srv.waitStderr("listening", 5*time.Second)
		cl := tp.start(tp.A, "psend tcp-send", psendBin, "tcp-send", "--dst", dst+":"+port, "--bytes", fmt.Sprint(nbytes), "--duration", "20s")
		if err := cl.wait(25 * time.Second); err != nil {
			t.Fatalf("tcp-send to %s: %v\n%s", dst, err, indent(cl.err.String()))
		}
		if err := srv.wait(5 * time.Second); err != nil {
			t.Fatalf("tcp-serve: %v\n%s", err, indent(srv.err.String()))
		}
		var s, r struct {
			Bytes  int64
			SHA256 string
		}
		cl.decode(&s)
		srv.decode(&r)
		if s.Bytes != nbytes || r.Bytes != s.Bytes || r.SHA256 != s.SHA256 {
			t.Errorf("TCP to %s: sent %d bytes (sha256 %.12s), received %d (%.12s)", dst, s.Bytes, s.SHA256, r.Bytes, r.SHA256)
		}

		args := []string{"ping", "-c", "5", "-i", "0.2", "-W", "2", strings.Trim(dst, "[]")}
		if i == 1 {
			args = append(args[:1], append([]string{"-6"}, args[1:]...)...)
		}
		if out, err := tp.run(tp.A, args...); err != nil || !strings.Contains(out, " 0% packet loss") {
			t.Errorf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Data segments alone are nbytes/1500 per family (packetshaper does not
	// ask for GSO packets, so the kernel queues MTU-sized segments): they
	// must have been queued, not bypassed.
	q := tp.queue(0)
	if got, min := q.IDSequence-before, uint64(2*nbytes/1500); got < min {
		t.Errorf("only %d packets went through the queue, want at least %d", got, min)
	}
	acc, drop, line := finalStats(t, tp.stopShaper(sh))
	t.Logf("final stats: %s", line)
	if drop != 0 || acc < uint64(2*nbytes/1500) {
		t.Errorf("packetshaper accepted %d, dropped %d: want no drops under a high limit", acc, drop)
	}
}

// TestRulesScript checks scripts/rules.sh inside a namespace: add is
// idempotent, del removes exactly the rule it names and is fine when the
// rule is absent, and every rule has the bypass flag.
func TestRulesScript(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	count := func(tool string) int {
		return strings.Count(tp.must(tp.B, tool, "-w", "-S"), "NFQUEUE")
	}
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000")
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000")
	tp.rules("add", "--queue", "1-2", "--src", "10.213.0.0/24", "--chain", "FORWARD")
	// Someone else's NFQUEUE rule, which del must leave alone.
	tp.must(tp.B, "iptables", "-w", "-A", "INPUT", "-p", "udp", "--dport", "9000", "-j", "NFQUEUE", "--queue-num", "0")
	if n4, n6 := count("iptables"), count("ip6tables"); n4 != 3 || n6 != 1 {
		t.Errorf("after add×2 + add --src v4 + a foreign rule: %d IPv4 and %d IPv6 NFQUEUE rules, want 3 and 1\n%s", n4, n6,
			tp.must(tp.B, "iptables", "-S"))
	}
	v4 := tp.must(tp.B, "iptables", "-w", "-S")
	if !strings.Contains(v4, "--queue-balance 1:2 --queue-bypass") {
		t.Errorf("no balanced rule with bypass:\n%s", v4)
	}
	for _, l := range strings.Split(v4, "\n") {
		if strings.Contains(l, "packetshaper") && !strings.Contains(l, "--queue-bypass") {
			t.Errorf("rule without --queue-bypass: %s", l)
		}
	}
	tp.rules("del", "--queue", "0", "--proto", "udp", "--dport", "9000")
	tp.rules("del", "--queue", "0", "--proto", "udp", "--dport", "9000")
	if n4, n6 := count("iptables"), count("ip6tables"); n4 != 2 || n6 != 0 {
		t.Errorf("after del×2: %d IPv4 and %d IPv6 NFQUEUE rules, want 2 (FORWARD + foreign) and 0", n4, n6)
	}
	tp.rules("del", "--all")
	if n4 := count("iptables"); n4 != 1 {
		t.Errorf("after del --all: %d IPv4 NFQUEUE rules, want the foreign one only\n%s", n4, tp.must(tp.B, "iptables", "-S"))
	}
}

// TestRulesScriptNft is TestRulesScript for the nft backend, which keeps its
// rules in its own table.
func TestRulesScriptNft(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	// The kernel may lack nft_queue (CONFIG_NFT_QUEUE): then rules.sh must
	// say so in one line, and there is nothing more to test here.
	out, err := tp.run(tp.B, rulesScript, "add", "--backend", "nft", "--queue", "0", "--proto", "udp", "--dport", "9000")
	if err != nil && strings.Contains(out, "CONFIG_NFT_QUEUE") {
		t.Skipf("nft backend not tested: this kernel has no nft queue support: %s", lastLine(out))
	} else if err != nil {
		t.Fatalf("rules.sh add --backend nft: %v\n%s", err, out)
	}
	tp.rules("add", "--backend", "nft", "--queue", "0", "--proto", "udp", "--dport", "9000")
	nft := tp.must(tp.B, "nft", "list", "table", "inet", "packetshaper")
	if n, nb := nftQueueRules(nft); n != 1 || nb != 1 {
		t.Errorf("after nft add×2: %d queue rules, %d of them with bypass (want 1 and 1):\n%s", n, nb, nft)
	}
	tp.rules("del", "--backend", "nft", "--queue", "0", "--proto", "udp", "--dport", "9000")
	tp.rules("del", "--backend", "nft", "--queue", "0", "--proto", "udp", "--dport", "9000")
	if out, err := tp.run(tp.B, "nft", "list", "table", "inet", "packetshaper"); err == nil {
		t.Errorf("table inet packetshaper still there after del:\n%s", out)
	}
}

// TestRulesScriptOffload checks rules.sh --offload: add is idempotent and
// its drop rules repeat the queue rule's match; --dry-run changes nothing; a
// queue rule that cannot be added (nft backend without nft queue support)
// takes its drop rules back; del removes a queue rule's drop rules, with or
// without --offload, and the table with the last of them; del --all removes
// the table.
func TestRulesScriptOffload(t *testing.T) {
	parallel(t)
	needRoot(t)
	tp := newTopo(t)
	const table = "packetshaper_offload"
	// dropRules lists the drop rules of the offload table (nil: no table).
	dropRules := func() []string {
		out, err := tp.run(tp.B, "nft", "list", "table", "inet", table)
		if err != nil {
			return nil
		}
		rules := []string{}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, " @ports") || strings.Contains(l, " @noports") {
				rules = append(rules, strings.TrimSpace(l))
			}
		}
		return rules
	}
	nfqueue := func(tool string) int { return strings.Count(tp.must(tp.B, tool, "-w", "-S"), "NFQUEUE") }
	udp := []string{"--queue", "0", "--proto", "udp", "--dport", "9000"}
	gre := []string{"--queue", "1", "--proto", "gre", "--src", "10.213.0.0/24", "--chain", "FORWARD"}

	tp.rules(append([]string{"add", "--offload", "--dry-run"}, udp...)...)
	if r := dropRules(); r != nil || nfqueue("iptables") != 0 {
		t.Fatalf("add --dry-run changed something: drop rules %q, %d NFQUEUE rules", r, nfqueue("iptables"))
	}
	tp.rules(append([]string{"add", "--offload"}, udp...)...)
	tp.rules(append([]string{"add", "--offload"}, udp...)...)
	r := dropRules()
	if len(r) != 2 || nfqueue("iptables") != 1 || nfqueue("ip6tables") != 1 {
		t.Fatalf("after add --offload ×2: %d drop rules (want 2), %d+%d NFQUEUE rules (want 1+1):\n%s",
			len(r), nfqueue("iptables"), nfqueue("ip6tables"), strings.Join(r, "\n"))
	}
	for i, set := range []string{"@ports4", "@ports6"} {
		if !strings.Contains(r[i], "udp dport 9000") || !strings.Contains(r[i], " "+set+" add "+set+" { ") || !strings.Contains(r[i], " limit rate over 4000000000/second } counter packets 0 bytes 0 drop") {
			t.Errorf("drop rule %d does not match udp dport 9000 and drop on %s, by the element's limit, with a counter: %s", i, set, r[i])
		}
	}
	tp.rules(append([]string{"add", "--offload"}, gre...)...)
	if r := dropRules(); len(r) != 3 || !strings.Contains(r[2], "ip saddr 10.213.0.0/24") || !strings.Contains(r[2], "ip saddr . ip daddr . meta l4proto @noports4") {
		t.Errorf("after add --offload --proto gre --src: want a third rule on @noports4 for 10.213.0.0/24:\n%s", strings.Join(r, "\n"))
	}
	nft := tp.must(tp.B, "nft", "list", "table", "inet", table)
	for _, want := range []string{"chain input {", "chain forward {", "type filter hook input priority -20;", "flags dynamic,timeout", "timeout 10s"} {
		if !strings.Contains(nft, want) {
			t.Errorf("offload table has no %q:\n%s", want, nft)
		}
	}

	out, err := tp.run(tp.B, rulesScript, "add", "--backend", "nft", "--queue", "2", "--proto", "tcp", "--offload", "--netns", tp.B)
	switch {
	case err != nil && strings.Contains(out, "CONFIG_NFT_QUEUE"):
		if r := dropRules(); len(r) != 3 {
			t.Errorf("the nft queue rule failed but its drop rules stayed: %d drop rules, want 3:\n%s", len(r), strings.Join(r, "\n"))
		}
	case err != nil:
		t.Fatalf("rules.sh add --backend nft --offload: %v\n%s", err, out)
	default:
		if q := tp.must(tp.B, "nft", "list", "table", "inet", "packetshaper"); !strings.Contains(q, "counter packets") {
			t.Errorf("nft queue rule without a counter:\n%s", q)
		}
		tp.rules("del", "--backend", "nft", "--queue", "2", "--proto", "tcp")
	}

	if l := tp.rules("list"); strings.Count(l, "@ports") != 4 || strings.Count(l, "@noports") != 2 { // each twice: lookup, add
		t.Errorf("list does not show the 3 drop rules:\n%s", l)
	}
	tp.rules(append([]string{"del"}, udp...)...) // no --offload: the drop rules go all the same
	if r := dropRules(); len(r) != 1 || nfqueue("iptables") != 1 || nfqueue("ip6tables") != 0 {
		t.Errorf("after del of the udp rule: %d drop rules (want 1), %d+%d NFQUEUE rules (want 1+0)", len(r), nfqueue("iptables"), nfqueue("ip6tables"))
	}
	tp.rules(append([]string{"del", "--offload"}, gre...)...)
	if r := dropRules(); r != nil || nfqueue("iptables") != 0 {
		t.Errorf("after del of the last rule: table %s still there (%q) or %d NFQUEUE rules", table, r, nfqueue("iptables"))
	}

	tp.rules(append([]string{"add", "--offload"}, udp...)...)
	tp.rules("del", "--all", "--dry-run")
	if r := dropRules(); len(r) != 2 {
		t.Errorf("del --all --dry-run changed the drop rules: %q", r)
	}
	tp.rules("del", "--all")
	if r := dropRules(); r != nil || nfqueue("iptables") != 0 || nfqueue("ip6tables") != 0 {
		t.Errorf("after del --all: drop rules %q, %d+%d NFQUEUE rules", r, nfqueue("iptables"), nfqueue("ip6tables"))
	}

	if out, err := tp.run(tp.B, rulesScript, "add", "--queue", "0", "--proto", "icmp", "--offload", "--netns", tp.B); err == nil || !strings.Contains(out, "never offloaded") {
		t.Errorf("add --proto icmp --offload: %v, %s; want a refusal", err, out)
	}
}

// nftQueueStmt matches the queue statement of an nft rule as `nft list`
// prints it: "queue flags bypass to 0" (nft >= 0.9.9, as rules.sh writes it)
// or "queue num 0 bypass" (older). The rule's comment ("packetshaper
// queue=0 ...") does not match.
var (
	nftQueueStmt   = regexp.MustCompile(`\bqueue (?:flags [a-z,-]+ )?(?:to|num) [0-9]`)
	nftQueueBypass = regexp.MustCompile(`\bqueue (?:flags [a-z,-]*bypass[a-z,-]* to [0-9]|num [0-9][0-9-]*(?: [a-z,-]+)*? bypass\b)`)
)

// nftQueueRules counts the rule lines of an `nft list` output that have a
// queue statement, and how many of those have the bypass flag.
func nftQueueRules(nft string) (rules, bypass int) {
	for _, l := range strings.Split(nft, "\n") {
		if nftQueueStmt.MatchString(l) {
			rules++
			if nftQueueBypass.MatchString(l) {
				bypass++
			}
		}
	}
	return rules, bypass
}

func lastLine(s string) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	return l[len(l)-1]
}

// TestNftQueueRules checks the nft listing parser on the shapes `nft list`
// prints (this kernel may lack nft queue support, so TestRulesScriptNft may
// skip): only the queue statement counts, never the rule's comment.
func TestNftQueueRules(t *testing.T) {
	parallel(t)
	for _, c := range []struct {
		nft          string
		rules, bypas int
	}{
		{"table inet packetshaper {\n\tchain input {\n\t\ttype filter hook input priority -10; policy accept;\n" +
			"\t\tmeta nfproto ipv4 meta l4proto udp th dport 9000 queue flags bypass to 0 comment \"packetshaper queue=0 proto=udp dport=9000 family=ipv4\"\n\t}\n}\n", 1, 1},
		{"\t\tth dport 9000 queue to 0 comment \"packetshaper queue=0\"\n", 1, 0},
		{"\t\tudp dport 9000 counter packets 12 bytes 3400 queue flags bypass to 0 comment \"packetshaper queue=0 proto=udp dport=9000 family=both\"\n", 1, 1},
		{"\t\tth dport 9000 queue num 0 bypass comment \"packetshaper queue=0\"\n\t\tqueue flags bypass,fanout to 1-2 comment \"packetshaper queue=1-2\"\n", 2, 2},
		{"\t\tth dport 9000 accept comment \"packetshaper queue=0 bypass\"\n", 0, 0},
		{"\t\tqueue flags bypass to 0 comment \"a\"\n\t\tqueue flags bypass to 0 comment \"b\"\n", 2, 2},
	} {
		if n, b := nftQueueRules(c.nft); n != c.rules || b != c.bypas {
			t.Errorf("nftQueueRules(%q) = %d rules, %d with bypass; want %d, %d", c.nft, n, b, c.rules, c.bypas)
		}
	}
}
