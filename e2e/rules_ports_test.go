package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
)

// TestRulesPortRanges: rules.sh's --dport range and --sport divert exactly
// their packets (iptables), and the nft backend takes them too (its rules
// and the --offload drop rules loaded, with a test verdict, as this kernel
// has no nft_queue); del removes them all.
func TestRulesPortRanges(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	tp.rules("add", "--queue", "0", "--proto", "udp", "--dport", "9000-9010", "--family", "ipv4")
	tp.rules("add", "--queue", "0", "--proto", "udp", "--sport", "31000-31001", "--family", "ipv4")
	ipt := tp.must(tp.B, "iptables", "-S", "INPUT")
	for _, want := range []string{"--dport 9000:9010", `"packetshaper queue=0 proto=udp dport=9000-9010"`, "--sport 31000:31001", `"packetshaper queue=0 proto=udp sport=31000-31001"`} {
		if !strings.Contains(ipt, want) {
			t.Errorf("iptables -S has no %q:\n%s", want, ipt)
		}
	}
	dir, pol := policyFile(t, "[[rule]]\nname = \"all\"\npps = 100000\nburst = 10000\n")
	sock := filepath.Join(dir, "ps.sock")
	tp.startShaper("--queue", "0", "--policy", pol, "--control-socket", sock, "--stats-interval", "0")
	rc := tp.startRecv(":9005,:9011,:9500", "--duration", "30s", "--idle", "2s")
	// Diverted: 20 to 9005 (in the range) and 20 from sport 31001 to 9500;
	// not: 20 to 9011 (past it) and 20 from sport 31002 to 9500.
	tp.send("--dst", tp.IPB+":9005,"+tp.IPB+":9011", "--flows", "1", "--sport", "30000", "--pps", "200", "--count", "20")
	tp.send("--dst", tp.IPB+":9500", "--flows", "2", "--sport", "31001", "--pps", "200", "--count", "20")
	r := recvDone(rc, 35*time.Second)
	if r.Total != 80 {
		t.Errorf("received %d datagrams, want all 80 (the rule limits nothing)", r.Total)
	}
	// Every datagram was received: every diverted one was decided, and
	// its flow counted.
	out := tp.must(tp.B, shaperBin, "flows", "--control-socket", sock, "--json", "--sort", "none")
	keys := map[string]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var f control.Flow
		if err := json.Unmarshal([]byte(l), &f); err != nil {
			t.Fatalf("flows --json line %q: %v", l, err)
		}
		keys[f.Key] = f.Packets
	}
	want := map[string]uint64{
		"udp " + tp.IPA + ":30000 > " + tp.IPB + ":9005": 20,
		"udp " + tp.IPA + ":31001 > " + tp.IPB + ":9500": 20,
	}
	if len(keys) != len(want) {
		t.Errorf("the shaper saw flows %v; want only %v", keys, want)
	}
	for k, n := range want {
		if keys[k] != n {
			t.Errorf("flow %s: %d packets seen, want %d (all %v)", k, keys[k], n, keys)
		}
	}
	tp.rules("del", "--all")
	if out := tp.must(tp.B, "iptables", "-S"); strings.Contains(out, "packetshaper") {
		t.Errorf("rules left after del --all:\n%s", out)
	}

	// nft: the same options load (a test verdict for the queue
	// statement), with the --offload drop rules.
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, rulesScript, "add", "--backend", "nft", "--queue", "0", "--proto", "udp", "--dport", "9000-9010", "--sport", "53", "--offload", "--netns", tp.B)
	cmd.Env = append(os.Environ(), "RULES_SH_TEST_VERDICT=accept")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("rules.sh add --backend nft ...: %v\n%s", err, out)
	}
	nft := tp.must(tp.B, "nft", "list", "ruleset")
	for _, want := range []string{`comment "packetshaper queue=0 proto=udp dport=9000-9010 sport=53 family=both"`, "@ports4", "@ports6"} {
		if !strings.Contains(nft, want) {
			t.Errorf("nft list ruleset has no %q:\n%s", want, nft)
		}
	}
	// nft writes "meta l4proto udp th dport" as "udp dport": the queue
	// rule and the two drop rules.
	if n := strings.Count(nft, "udp dport 9000-9010 udp sport 53 "); n != 3 {
		t.Errorf("nft list ruleset has %d rules with udp dport 9000-9010 udp sport 53, want 3:\n%s", n, nft)
	}
	tp.rules("del", "--backend", "nft", "--queue", "0", "--proto", "udp", "--dport", "9000-9010", "--sport", "53")
	if out := tp.must(tp.B, "nft", "list", "ruleset"); strings.Contains(out, "packetshaper") {
		t.Errorf("nft rules left after del:\n%s", out)
	}
}
