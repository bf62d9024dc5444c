package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/internal/control"
	"github.com/packetshaper/packetshaper/internal/testutil"
)

// TestFastpathSeen: with --fastpath, the kernel's rules and flows are seen
// like the queue's, labelled by path. After real traffic to a rule the
// kernel runs (3 flows) and to one user space runs (2 flows):
// `packetshaper flows` lists the kernel rule's flows, read from its flow
// map, once each with path kernel (and the queue's with path queue);
// `status --json` gives each rule its path, the kernel rule its flows and
// its packets, and the queue's flow total both paths'; /metrics labels the
// rules' series path="kernel" or path="queue", with the kernel rule's flows
// and packets; the final stats line marks the kernel rule.
func TestFastpathSeen(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	pol, sock := tp.divertFastpath(fastpathPolicy)
	addr := tp.IPB + ":9464"
	sh := tp.startFastpathShaper(pol, "--control-socket", sock, "--metrics-addr", addr, "--stats-interval", "0")
	rc := tp.startRecv(":9000,:9001", "--duration", "30s", "--idle", "2s")
	const kernFlows, userFlows = 3, 2
	kern := tp.send("--dst", tp.IPB+":9000", "--flows", fmt.Sprint(kernFlows), "--sport", "20000", "--pps", "300", "--duration", "1s")
	user := tp.send("--dst", tp.IPB+":9001", "--flows", fmt.Sprint(userFlows), "--sport", "21000", "--pps", "200", "--duration", "1s")
	recvDone(rc, 35*time.Second)
	if kern.Sent == 0 || user.Sent == 0 {
		t.Fatalf("sent %d and %d packets", kern.Sent, user.Sent)
	}

	// Status: the kernel's flows are counted every second; wait for them.
	var st control.Status
	status := func() {
		if err := json.Unmarshal([]byte(tp.must(tp.B, shaperBin, "status", "--control-socket", sock, "--json")), &st); err != nil {
			t.Fatal(err)
		}
	}
	rule := func(name string) control.Rule {
		for _, r := range st.Rules {
			if r.Name == name {
				return r
			}
		}
		t.Fatalf("status has no rule %q: %+v", name, st.Rules)
		return control.Rule{}
	}
	if !testutil.WaitFor(t, 15*time.Second, func() bool { status(); return rule("kern").Flows == kernFlows }) {
		t.Errorf("status: rule kern has %d flows, want %d (the kernel's flow map)", rule("kern").Flows, kernFlows)
	}
	k, u := rule("kern"), rule("user")
	if k.Path != "kernel" || u.Path != "queue" {
		t.Errorf("status: paths kern %q, user %q; want kernel, queue", k.Path, u.Path)
	}
	if k.Packets != kern.Sent || k.Evictions != 0 || u.Flows != userFlows || u.Packets != user.Sent {
		t.Errorf("status: kern %d packets %d evictions, user %d flows %d packets; want %d, 0, %d, %d", k.Packets, k.Evictions, u.Flows, u.Packets, kern.Sent, userFlows, user.Sent)
	}
	if len(st.Queues) != 1 || st.Queues[0].Flows != kernFlows+userFlows {
		t.Errorf("status: queues %+v, want one with %d flows (both paths')", st.Queues, kernFlows+userFlows)
	}

	// The listing: every flow once, labelled by path.
	listing := func(args ...string) []control.Flow {
		return tp.flowsListing(tp.B, sock, append([]string{"--sort", "none"}, args...)...)
	}
	byPath := map[string]map[string]bool{}
	for _, f := range listing() {
		want := map[string]string{"kern": "kernel", "user": "queue"}[f.Rule]
		if f.Path != want {
			t.Errorf("flow %s of rule %s: path %q, want %q", f.Key, f.Rule, f.Path, want)
		}
		if byPath[f.Path] == nil {
			byPath[f.Path] = map[string]bool{}
		}
		if byPath[f.Path][f.Key] {
			t.Errorf("flow %s listed twice", f.Key)
		}
		byPath[f.Path][f.Key] = true
	}
	for i := range kernFlows {
		key := fmt.Sprintf("udp %s:%d > %s:9000", tp.IPA, 20000+i, tp.IPB)
		if !byPath["kernel"][key] {
			t.Errorf("packetshaper flows: no kernel flow %q; listed %v", key, byPath)
		}
	}
	if len(byPath["kernel"]) != kernFlows || len(byPath["queue"]) != userFlows {
		t.Errorf("packetshaper flows: %d kernel flows and %d queue flows, want %d and %d: %v", len(byPath["kernel"]), len(byPath["queue"]), kernFlows, userFlows, byPath)
	}
	if fs := listing("--rule", "kern"); len(fs) != kernFlows {
		t.Errorf("packetshaper flows --rule kern: %d flows, want %d", len(fs), kernFlows)
	}
	if out := tp.must(tp.B, shaperBin, "flows", "--control-socket", sock, "--rule", "kern"); !strings.Contains(out, "PATH") || strings.Count(out, " kernel\n") != kernFlows {
		t.Errorf("packetshaper flows --rule kern: want a PATH column, kernel on each of %d lines:\n%s", kernFlows, out)
	}

	// Metrics: the rules' series labelled by path.
	m := tp.scrape(tp.A, addr)
	m.expect("kernel rule", float64(kernFlows), "packetshaper_rule_flows", "rule=kern", "path=kernel")
	m.expect("kernel rule", float64(kern.Sent), "packetshaper_rule_packets_total", "rule=kern", "path=kernel")
	m.expect("kernel rule", 0, "packetshaper_rule_flow_evictions_total", "rule=kern", "path=kernel")
	m.expect("queue rule", float64(userFlows), "packetshaper_rule_flows", "rule=user", "path=queue")
	m.expect("queue rule", float64(user.Sent), "packetshaper_rule_packets_total", "rule=user", "path=queue")
	m.expect("both paths", float64(kernFlows+userFlows), "packetshaper_flows", "queue=0")
	for _, bad := range [][]string{{"rule=kern", "path=queue"}, {"rule=user", "path=kernel"}} {
		if _, ok := m.lookup("packetshaper_rule_packets_total", bad...); ok {
			t.Errorf("metrics: a series %v", bad)
		}
	}

	log := tp.stopShaper(sh)
	_, _, line := finalStats(t, log)
	if !strings.Contains(line, "rule.kern.path=kernel") || strings.Contains(line, "rule.user.path=") || statField(t, line, "rule.kern.flows") != kernFlows {
		t.Errorf("final stats line: want rule.kern.path=kernel, rule.kern.flows=%d, no path for rule user: %s", kernFlows, line)
	}
}
