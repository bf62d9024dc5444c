package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/packetshaper/packetshaper/flows"
	"github.com/packetshaper/packetshaper/shaper"
)

// TestFlowTimeoutRaised: a rule whose limiter remembers an idle flow for
// longer than the default flow-timeout gets its default raised to that
// memory, with a one-line warning that names both values; Format (check)
// prints the raised value.
func TestFlowTimeoutRaised(t *testing.T) {
	for _, c := range []struct{ rule, want, timeout string }{
		{"pps = 0.01\n", `rule "a": flow-timeout: the default 1m0s is raised to 8m20s, what its token-bucket remembers of an idle flow (burst / rate: the time to refill the whole bucket): a flow forgotten sooner would come back with more than its limit`, "8m20s"},
		{"pps = 0.01\nalgo = \"leaky-bucket\"\nmax-delay = \"10s\"\n", `rule "a": flow-timeout: the default 1m0s is raised to 8m30s, what its leaky-bucket remembers of an idle flow (burst / rate + max-delay: the time to refill the whole bucket from its deepest queue): a flow forgotten sooner would come back with more than its limit`, "8m30s"},
		{"pps = 1\nalgo = \"fixed-window\"\nwindow = \"1h\"\n", `rule "a": flow-timeout: the default 1m0s is raised to 1h0m0s, what its fixed-window remembers of an idle flow (the window): a flow forgotten sooner would come back with more than its limit`, "1h0m0s"},
		{"pps = 1\nalgo = \"sliding-window\"\nwindow = \"90s\"\n", `rule "a": flow-timeout: the default 1m0s is raised to 1m30s, what its sliding-window remembers of an idle flow (the window): a flow forgotten sooner would come back with more than its limit`, "1m30s"},
		{"pps = 1\nalgo = \"sliding-window-counter\"\nwindow = \"45s\"\n", `rule "a": flow-timeout: the default 1m0s is raised to 1m30s, what its sliding-window-counter remembers of an idle flow (2 × window: the previous window's count weighs on the next): a flow forgotten sooner would come back with more than its limit`, "1m30s"},
		{"bitrate = \"8kbit\"\n", `rule "a": flow-timeout: the default 1m0s is raised to 1m6s, what its token-bucket remembers of an idle flow (burst / rate: the time to refill the whole bucket): a flow forgotten sooner would come back with more than its limit`, "1m6s"},
		// Remembered for less than the default: nothing to say.
		{"pps = 1\n", "", "1m0s"},
		{"pps = 1\nalgo = \"sliding-window-counter\"\nwindow = \"30s\"\n", "", "1m0s"},
	} {
		src := "[[rule]]\nname = \"a\"\n" + c.rule
		f, comp := parseCompile(t, fmt.Sprintf("%q", c.rule), src, Options{})
		var warns []string
		for _, w := range comp.Warnings() {
			if strings.Contains(w, "flow-timeout") {
				warns = append(warns, w)
			}
		}
		switch {
		case c.want == "" && len(warns) > 0:
			t.Errorf("%q: warned %q", c.rule, warns)
		case c.want != "" && !slices.Equal(warns, []string{c.want}):
			t.Errorf("%q: warnings\n got %q\nwant %q", c.rule, warns, c.want)
		}
		d := f.WithDefaults().Rules[0]
		if got := time.Duration(d.FlowTimeout).String(); got != c.timeout {
			t.Errorf("%q: flow-timeout with defaults %s, want %s", c.rule, got, c.timeout)
		}
		if got := comp.Policy().Rules[0].Limit.FlowTimeout; got != int64(d.FlowTimeout) {
			t.Errorf("%q: compiled flow timeout %v, want %v", c.rule, time.Duration(got), d.FlowTimeout)
		}
		var b strings.Builder
		if err := f.Format(&b); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("flow-timeout = %q", c.timeout); !strings.Contains(b.String(), want) {
			t.Errorf("%q: Format lacks %s:\n%s", c.rule, want, b.String())
		}
	}
}

// TestFlowTimeoutRefused: a flow-timeout given shorter than what the
// limiter remembers is refused, in one line at its place, naming both
// values; one as long is accepted.
func TestFlowTimeoutRefused(t *testing.T) {
	for _, c := range []struct{ rule, want string }{
		{"pps = 1\nalgo = \"fixed-window\"\nwindow = \"1h\"\nflow-timeout = \"1m\"\n",
			`p.toml:6:16: rule "a": flow-timeout: 1m0s is below what the fixed-window remembers of an idle flow, 1h0m0s (the window): a flow forgotten sooner would come back with more than its limit; set at least 1h0m0s or leave flow-timeout out`},
		{"pps = 3\nflow-timeout = \"1s\"\n",
			`p.toml:4:16: rule "a": flow-timeout: 1s is below what the token-bucket remembers of an idle flow, 1.666666667s (burst / rate: the time to refill the whole bucket): a flow forgotten sooner would come back with more than its limit; set at least 2s or leave flow-timeout out`},
		{"pps = 10\nalgo = \"sliding-window-counter\"\nwindow = \"10s\"\nflow-timeout = \"19s\"\n",
			`p.toml:6:16: rule "a": flow-timeout: 19s is below what the sliding-window-counter remembers of an idle flow, 20s (2 × window: the previous window's count weighs on the next): a flow forgotten sooner would come back with more than its limit; set at least 20s or leave flow-timeout out`},
		{"pps = 10\nalgo = \"sliding-window\"\nwindow = \"10s\"\nflow-timeout = \"9s\"\n",
			`p.toml:6:16: rule "a": flow-timeout: 9s is below what the sliding-window remembers of an idle flow, 10s (the window): a flow forgotten sooner would come back with more than its limit; set at least 10s or leave flow-timeout out`},
		{"pps = 10\nburst = 10\nshape = true\nmax-delay = \"2s\"\nflow-timeout = \"2s\"\n",
			`p.toml:7:16: rule "a": flow-timeout: 2s is below what the token-bucket remembers of an idle flow, 3s (burst / rate + max-delay: the time to refill the whole bucket from its deepest queue): a flow forgotten sooner would come back with more than its limit; set at least 3s or leave flow-timeout out`},
		{"pps = 1\nalgo = \"fixed-window\"\nwindow = \"1h\"\nflow-timeout = \"1h\"\n", ""},
		{"pps = 10\nalgo = \"sliding-window-counter\"\nwindow = \"10s\"\nflow-timeout = \"20s\"\n", ""},
	} {
		src := "[[rule]]\nname = \"a\"\n" + c.rule
		_, err := Parse("p.toml", []byte(src))
		got := ""
		if err != nil {
			got = err.Error()
			var e *Error
			if !errors.As(err, &e) || strings.Contains(got, "\n") {
				t.Errorf("%q: %#v", c.rule, err)
			}
		}
		if got != c.want {
			t.Errorf("%q:\n got %s\nwant %s", c.rule, got, c.want)
		}
	}
	// A File built in code (the flags) gets the same, without a place.
	pps := 0.01
	f := &File{Name: "flags", Rules: []Rule{{Name: "default", PPS: &pps, FlowTimeout: Duration(time.Minute)}}}
	var e *Error
	if err := f.Validate(); !errors.As(err, &e) || e.Field != "flow-timeout" || e.Line != 0 ||
		!strings.HasPrefix(e.Msg, "1m0s is below what the token-bucket remembers of an idle flow, 8m20s") {
		t.Errorf("Validate in code: %#v", err)
	}
}

// TestForgetIdleGivesNoMore: for each algorithm, a rule with the default
// flow-timeout run through the engine over bursts separated by idle gaps
// just past the old default (61 s) accepts no more than the same rule whose
// flows are never forgotten: forgetting an idle flow gives it nothing.
func TestForgetIdleGivesNoMore(t *testing.T) {
	const sec = int64(time.Second)
	for _, c := range []struct {
		rule        string
		burst, gaps int
	}{
		{"pps = 0.01\n", 10, 20},
		{"pps = 0.01\nalgo = \"leaky-bucket\"\nmax-delay = \"10s\"\n", 10, 20},
		{"bitrate = \"8kbit\"\n", 3000, 10},
		{"pps = 0.1\nalgo = \"fixed-window\"\nwindow = \"1h\"\n", 400, 20},
		{"pps = 0.1\nalgo = \"sliding-window\"\nwindow = \"10m\"\n", 80, 20},
		{"pps = 1\nalgo = \"sliding-window-counter\"\nwindow = \"1m\"\n", 80, 20},
		{"pps = 0.5\nalgo = \"sliding-window-counter\"\nwindow = \"2m\"\n", 80, 20},
	} {
		comp := mustCompile(t, "[[rule]]\nname = \"a\"\n"+c.rule, Options{})
		gap := 61 * sec
		run := func(timeout int64) (accepted int) {
			pol := comp.Policy()
			pol.Rules = slices.Clone(pol.Rules)
			if timeout != 0 {
				pol.Rules[0].Limit.FlowTimeout = timeout
			}
			e, err := shaper.NewPolicy(pol)
			if err != nil {
				t.Fatal(err)
			}
			pkt := packet4(flows.ProtoUDP, 1, 40000, 53)
			var d shaper.Decision
			// Aligned to the hour, so that every window starts at t0.
			t0 := int64(1e18) / (3600 * sec) * (3600 * sec)
			for g := range c.gaps {
				at := t0 + int64(g)*gap
				for i := range c.burst {
					e.DecidePacket(pkt, nil, at+int64(i), &d)
					if d.Verdict == shaper.Accept {
						accepted++
					}
				}
			}
			return accepted
		}
		// Gaps just past the old default, and just past the flow
		// timeout itself (each flow forgotten at each gap).
		for _, gap = range []int64{61 * sec, comp.Policy().Rules[0].Limit.FlowTimeout + 1} {
			got, kept := run(0), run(-1)
			t.Logf("%q: %d bursts of %d, %v apart: %d accepted with the default flow-timeout, %d never forgetting", c.rule, c.gaps, c.burst, time.Duration(gap), got, kept)
			if kept == 0 || got > kept {
				t.Errorf("%q, gaps of %v: with the default flow-timeout %d accepted, never forgetting %d", c.rule, time.Duration(gap), got, kept)
			}
		}
	}
}

// TestMappedPrefixRefused: an IPv4-mapped IPv6 address or prefix never
// matches an IPv4 packet: check refuses it in one line at its place, with
// the IPv4 form to write.
func TestMappedPrefixRefused(t *testing.T) {
	for _, c := range []struct{ match, want string }{
		{`match = { src = ["::ffff:10.0.0.0/104"] }`,
			`p.toml:4:18: rule "a": match.src: bad CIDR "::ffff:10.0.0.0/104": an IPv4-mapped IPv6 prefix never matches IPv4 packets, which carry IPv4 addresses (write "10.0.0.0/8")`},
		{`match = { dst = ["fd00::/8", "::ffff:192.168.1.7"] }`,
			`p.toml:4:30: rule "a": match.dst: bad address "::ffff:192.168.1.7": an IPv4-mapped IPv6 address never matches IPv4 packets, which carry IPv4 addresses (write "192.168.1.7")`},
		{`match = { src = ["::ffff:0:0/96"] }`,
			`p.toml:4:18: rule "a": match.src: bad CIDR "::ffff:0:0/96": an IPv4-mapped IPv6 prefix never matches IPv4 packets, which carry IPv4 addresses (write "0.0.0.0/0")`},
		{`match = { src = ["::ffff:10.1.2.3/128"] }`,
			`p.toml:4:18: rule "a": match.src: bad CIDR "::ffff:10.1.2.3/128": an IPv4-mapped IPv6 prefix never matches IPv4 packets, which carry IPv4 addresses (write "10.1.2.3/32")`},
		// Not mapped: accepted as before.
		{`match = { src = ["::/0", "::ffff:0:0:0/96", "64:ff9b::/96"] }`, ""},
	} {
		src := "[[rule]]\nname = \"a\"\npps = 1\n" + c.match + "\n"
		_, err := Parse("p.toml", []byte(src))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.match, got, c.want)
		}
	}
}
