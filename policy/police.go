package policy

import (
	"fmt"
	"slices"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// PoliceTCPFigures is the measured difference the warning of a policing
// rule that takes TCP quotes: one iperf3 TCP transfer through a 20mbit
// rule, policed and shaped (docs/shaping.md, "TCP and UDP measured").
const PoliceTCPFigures = "one TCP transfer policed at 20mbit got 10.2 Mbit/s, shaped 19.5: docs/shaping.md"

// policesTCP reports whether rule s limits TCP by dropping what exceeds its
// rate (policing): an enforcing limit rule that does not shape, whose match
// takes TCP (proto tcp, or no proto).
func policesTCP(s *ruleSpec) bool {
	r := &s.rule
	if r.Action != shaper.ActionLimit || r.Shadow || r.MarkExceeded || r.Limit.Shape {
		return false
	}
	return s.match.proto == nil || slices.Contains(s.match.proto, flows.ProtoTCP)
}

// policeTCPWarning is the warning for a rule that polices TCP, or "": a
// TCP flow that loses packets backs off, and gets about half the rate.
func policeTCPWarning(s *ruleSpec) string {
	if !policesTCP(s) {
		return ""
	}
	what := "its match takes TCP"
	if s.match.proto == nil {
		what = "its match takes every protocol, TCP too"
	}
	fix := "add shape = true (--shape): packets over the rate wait in the kernel, up to max-delay, instead of being dropped"
	if s.rule.Limit.Algorithm != shaper.TokenBucket {
		fix = fmt.Sprintf("use algo = %q (or %q with shape = true): packets over the rate wait in the kernel, up to max-delay, instead of being dropped (%s cannot shape)", ShapeAlgo, DefaultAlgo, s.rule.Limit.Algorithm)
	}
	return fmt.Sprintf("rule %q polices TCP (%s, and it drops what exceeds the rate): a TCP flow that loses packets backs off to about half the rate (%s); %s, or match proto = [\"udp\"] if TCP is not meant",
		s.rule.Name, what, PoliceTCPFigures, fix)
}
