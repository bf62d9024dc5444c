package daemon

import "testing"

// TestDescribeRuleShape: status (and top, and the rule_info metric) say
// which rules shape, with the rate as the rule was written.
func TestDescribeRuleShape(t *testing.T) {
	rules := compilePolicy(t, rule("tcp", `proto = ["tcp"]`, `bitrate = "20mbit"`, "shape = true", `max-delay = "50ms"`)+
		rule("udp", `proto = ["udp"]`, "pps = 100")).Rules
	tcp, udp := describeRule(&rules[0]), describeRule(&rules[1])
	if !tcp.Shape || tcp.MaxDelaySecs != 0.05 || tcp.RateText() != "20 Mbit/s" {
		t.Errorf("tcp: Shape %v MaxDelaySecs %v RateText %q, want true 0.05 \"20 Mbit/s\"", tcp.Shape, tcp.MaxDelaySecs, tcp.RateText())
	}
	if udp.Shape || udp.MaxDelaySecs != 0 || udp.RateText() != "100 packets/s" {
		t.Errorf("udp: Shape %v MaxDelaySecs %v RateText %q, want false 0 \"100 packets/s\"", udp.Shape, udp.MaxDelaySecs, udp.RateText())
	}
}
