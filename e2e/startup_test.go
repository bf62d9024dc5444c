package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

const startupPolicy = `
[[rule]]
name = "enforced"
match = { proto = ["udp"], sport = ["20000"] }
pps = 1
burst = 2

[[rule]]
name = "trial"
match = { proto = ["udp"], sport = ["21000"] }
pps = 1
burst = 2
mode = "shadow"
`

// TestStartupFlowsShadowNoFlags runs the real binary on --queue 6 with its
// default control socket (in a /run/packetshaper of its own: a tmpfs in
// the shaper's mount namespace, so that no other shaper on the machine is
// seen) and checks: the startup line says the queues, the number of
// rules, the metrics URL and the control socket in force; packetshaper
// flows and status, with no flag, find it (as the operator would on the
// host); and flows count the shadow rule's packets over the limit as
// shadow_dropped, not dropped, as status's rule counters do.
func TestStartupFlowsShadowNoFlags(t *testing.T) {
	parallel(t)
	needShaper(t)
	tp := newTopo(t)
	tp.rules("add", "--queue", "6", "--proto", "udp", "--dport", "9000", "--family", "ipv4")
	_, pol := policyFile(t, startupPolicy)
	addr := tp.IPB + ":9464"
	script := `mkdir -p /run/packetshaper && mount -t tmpfs -o mode=0755 packetshaper-e2e /run/packetshaper && exec "$0" "$@"`
	sh := tp.start(tp.B, "packetshaper", "sh", "-c", script, shaperBin, "--queue", "6", "--policy", pol,
		"--metrics-addr", addr, "--stats-interval", "0")
	tp.waitBoundIn(tp.B, sh, 6)
	sh.waitStderr("msg=shaping", 10*time.Second)
	var line string
	for _, l := range strings.Split(sh.err.String(), "\n") {
		if strings.Contains(l, "msg=shaping") {
			line = l
		}
	}
	for _, want := range []string{"queues=6", "rule_count=2", "rules=enforced,trial", "metrics=http://" + addr + "/metrics",
		"control_socket=/run/packetshaper/packetshaper-6.sock"} {
		if !strings.Contains(line, want) {
			t.Errorf("the startup line lacks %q:\n%s", want, line)
		}
	}

	// 20 packets of each flow, at most 2 s.
	for _, sport := range []string{"20000", "21000"} {
		s := tp.send("--dst", tp.IPB+":9000", "--flows", "1", "--sport", sport, "--count", "20", "--pps", "100", "--duration", "2s")
		if s.Sent != 20 {
			t.Fatalf("sport %s: sent %d, want 20", sport, s.Sent)
		}
	}
	// The control commands, without flags, in the shaper's mount
	// namespace (where its /run/packetshaper is).
	ctl := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		argv := append([]string{fmt.Sprintf("--mount=/proc/%d/ns/mnt", sh.cmd.Process.Pid), "--", shaperBin}, args...)
		out, err := exec.CommandContext(ctx, "nsenter", argv...).CombinedOutput()
		if err != nil {
			t.Fatalf("packetshaper %s (no socket flag): %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	type flow struct {
		Rule                                              string
		Packets, Accepted, Dropped, ShadowDropped, Marked uint64
	}
	flows := map[string]flow{}
	// Every packet has been decided once the shaper's counters say 40.
	deadline := time.Now().Add(10 * time.Second)
	for {
		clear(flows)
		var total uint64
		sc := bufio.NewScanner(strings.NewReader(ctl("flows", "--json")))
		for sc.Scan() {
			var f struct {
				Rule          string `json:"rule"`
				Packets       uint64 `json:"packets"`
				Accepted      uint64 `json:"accepted"`
				Dropped       uint64 `json:"dropped"`
				ShadowDropped uint64 `json:"shadow_dropped"`
				Marked        uint64 `json:"marked"`
			}
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Fatalf("flows --json line %q: %v", sc.Text(), err)
			}
			flows[f.Rule] = flow{f.Rule, f.Packets, f.Accepted, f.Dropped, f.ShadowDropped, f.Marked}
			total += f.Packets
		}
		if total >= 40 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	enf, trial := flows["enforced"], flows["trial"]
	// At 100 packets/s for 0.2 s, 1 packet/s burst 2: 2 or 3 accepted
	// (1 more per second the sending takes on a loaded machine).
	if enf.Packets != 20 || enf.Dropped == 0 || enf.Accepted+enf.Dropped != 20 || enf.ShadowDropped != 0 {
		t.Errorf("the enforced rule's flow: %+v; want 20 packets, drops, no shadow drops", enf)
	}
	if trial.Packets != 20 || trial.Dropped != 0 || trial.Accepted != 20 || trial.ShadowDropped == 0 || trial.ShadowDropped > 18 {
		t.Errorf("the shadow rule's flow: %+v; want 20 packets, all accepted, dropped 0, shadow-dropped 1 to 18 (2 within the burst)", trial)
	}
	// The table: the shadow flow's drops in their own column.
	table := ctl("flows")
	if !strings.Contains(table, "SHADOW_DROPPED") || !strings.Contains(table, "trial") {
		t.Errorf("flows table:\n%s", table)
	}
	// status, without flags: the rules' counters say the same. status
	// reads the snapshot the queues publish every 100 ms and when idle
	// (internal/daemon's snapEvery), so it may lag the live listing by a
	// snapshot: it is read again until its packets are the listing's, for
	// at most 5 s, and then must agree in every counter.
	var st struct {
		Rules []struct {
			Name          string `json:"name"`
			Packets       uint64 `json:"packets"`
			Dropped       uint64 `json:"dropped"`
			ShadowDropped uint64 `json:"shadow_dropped"`
		} `json:"rules"`
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		st.Rules = nil
		if err := json.Unmarshal([]byte(ctl("status", "--json")), &st); err != nil {
			t.Fatalf("status --json: %v", err)
		}
		caught := len(st.Rules) == 2
		for _, r := range st.Rules {
			caught = caught && r.Packets == flows[r.Name].Packets
		}
		if caught || time.Now().After(deadline) {
			break
		}
	}
	if len(st.Rules) != 2 {
		t.Errorf("status lists %d rules, want 2", len(st.Rules))
	}
	for _, r := range st.Rules {
		f := flows[r.Name]
		if r.Dropped != f.Dropped || r.ShadowDropped != f.ShadowDropped || r.Packets != f.Packets {
			t.Errorf("rule %s: status dropped %d shadow_dropped %d packets %d; flows %+v", r.Name, r.Dropped, r.ShadowDropped, r.Packets, f)
		}
	}
	tp.stopShaper(sh)
}
