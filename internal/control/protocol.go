// Package control is the protocol of packetshaper's control socket: a
// root-owned unix socket (mode 0600) through which `packetshaper status`
// and `packetshaper flows` ask the running shaper about its queues, rules
// and flows. Package daemon serves it (Serve, with a Handler); the commands
// are clients (GetStatus, ListFlows).
//
// The protocol is JSON lines. A client connects, sends one request line
//
//	{"cmd":"status"}
//	{"cmd":"flows","rule":"ssh","top":10,"sort":"drops"}
//
// and reads answer lines until the server closes the connection. Each
// answer line is an object with one member:
//
//	{"status":{...}}                 the answer to status (Status)
//	{"flow":{...}}                   one flow of a listing (Flow), any number
//	{"end":{"flows":3,"listed":9}}   the end of a listing (End)
//	{"error":"..."}                  the request failed; nothing follows
//
// A listing without its end line was cut short. One request per
// connection; a server may close a connection that sends nothing for a
// while.
package control

import (
	"fmt"
	"strconv"
	"time"

	"github.com/packetshaper/packetshaper/internal/countname"
)

// Request is a client's one request line.
type Request struct {
	// Cmd is "status" or "flows".
	Cmd string `json:"cmd"`
	// Rule lists only that rule's flows ("": every rule's).
	Rule string `json:"rule,omitempty"`
	// Top, if above 0, lists only the Top flows first in Sort's order,
	// in that order; 0 lists every flow in the order of the flow tables.
	Top int `json:"top,omitempty"`
	// Sort is the order of Top: SortDrops (the default) or SortPackets.
	Sort string `json:"sort,omitempty"`
}

// Orders of a listing.
// The commands.
const (
	CmdStatus = "status"
	CmdFlows  = "flows"
)

const (
	SortDrops   = "drops"           // most packets dropped first, then most packets
	SortPackets = countname.Packets // most packets first, then most dropped
)

// check reports what is wrong with r.
func (r *Request) check() error {
	switch r.Cmd {
	case CmdStatus:
	case CmdFlows:
		if r.Top < 0 {
			return fmt.Errorf("top must not be negative, not %d", r.Top)
		}
		if r.Sort != "" && r.Sort != SortDrops && r.Sort != SortPackets {
			return fmt.Errorf("unknown sort %q (want %s or %s)", r.Sort, SortDrops, SortPackets)
		}
	default:
		return fmt.Errorf("unknown command %q (want status or flows)", r.Cmd)
	}
	return nil
}

// Flow is one flow of a listing, like a line of
// /proc/net/ipt_hashlimit/NAME.
type Flow struct {
	Queue uint16 `json:"queue"`
	Rule  string `json:"rule"`
	// Key is the flow's key as the rule makes it: "udp 10.0.0.1:5000 >
	// 10.0.0.2:9000", "src 10.1.2.0/24", ...
	Key      string `json:"key"`
	Packets  uint64 `json:"packets"`
	Accepted uint64 `json:"accepted"`
	Dropped  uint64 `json:"dropped"`
	// ShadowDropped: packets over a shadow rule's limit, accepted (not in
	// Dropped); Marked: packets over a marking rule's limit, accepted with
	// the mark. Packets = Accepted + Dropped.
	ShadowDropped uint64 `json:"shadow_dropped,omitempty"`
	Marked        uint64 `json:"marked,omitempty"`
	// Left is what the flow may still send now: the tokens in its bucket
	// (token-bucket), or what is left of the window's limit (the window
	// algorithms), in Unit.
	Left float64 `json:"left"`
	// Unit is "packets", or "bytes" for a rule with a bit rate.
	Unit string `json:"unit"`
	// IdleSecs is the time since the flow's last packet.
	IdleSecs float64 `json:"idle_secs"`
	// Expired: idle for longer than the rule's flow timeout, so its next
	// packet starts it afresh (Left is then a fresh flow's); it is still
	// in the table until its slot is reused.
	Expired bool `json:"expired,omitempty"`
	// Path is where the flow's rule runs: "queue" (NFQUEUE, the Go
	// engine) or "kernel" (the eBPF fast path, --fastpath). A kernel
	// flow is read from its rule's flow map, which holds the limiter's
	// state only: its Queue, Packets, Accepted and Dropped are 0.
	Path string `json:"path"`
}

// End closes a listing.
type End struct {
	// Flows is the number of flows sent; Listed, the number of flows the
	// server went through (more than Flows with Top).
	Flows  int `json:"flows"`
	Listed int `json:"listed"`
	// Secs is how long the listing took.
	Secs float64 `json:"secs"`
}

// Status is the state of the running shaper.
type Status struct {
	Version    string    `json:"version"`
	PID        int       `json:"pid"`
	Started    time.Time `json:"started"`
	UptimeSecs float64   `json:"uptime_secs"`
	// Policy is the rule file (--policy), or "command line" for the
	// limiter flags.
	Policy string `json:"policy"`
	// Mode is "fail-open" or "fail-closed".
	Mode    string  `json:"mode"`
	Offload bool    `json:"offload"`
	Reloads Reloads `json:"reloads"`
	Queues  []Queue `json:"queues"`
	// Rules are the rules of the policy in force, in order, with their
	// counters: each packet counted once, whichever queue it came from
	// (one engine decides for every queue).
	Rules []Rule `json:"rules"`
	// Fastpath: with --fastpath, the program's state at each interface.
	Fastpath []FastpathLink `json:"fastpath,omitempty"`
	// Totals are the policy's totals (Rule.Total names one), with their
	// counters.
	Totals []Total `json:"totals,omitempty"`
}

// Total is a limit its rules' packets meet together, beside their flows'
// limits ([[total]], or a rule's [rule.total], named "rule:NAME").
type Total struct {
	Name       string  `json:"name"`
	Algorithm  string  `json:"algorithm"`
	Rate       float64 `json:"rate"`
	Unit       string  `json:"unit"`
	Burst      float64 `json:"burst,omitempty"`
	WindowSecs float64 `json:"window_secs,omitempty"`
	// Packets met the total; Accepted passed it and their flow's limit
	// (charged to both); Dropped were over it (dropped, or accepted by
	// a shadow or marking rule).
	Packets  uint64 `json:"packets"`
	Accepted uint64 `json:"accepted"`
	Dropped  uint64 `json:"dropped"`
}

// FastpathLink is the fast path at one interface named by --fastpath.
type FastpathLink struct {
	Interface string `json:"interface"`
	// Ifindex is the interface's index attached at (0 while it is gone).
	Ifindex int `json:"ifindex"`
	// Attach is "tcx" or "tc" (clsact + cls_bpf), "" when not attached.
	Attach string `json:"attach,omitempty"`
	// State: "attached", "interface gone" or "attach failed: WHY".
	State string `json:"state"`
	// Reattached counts the attaches after the interface came back.
	Reattached uint64 `json:"reattached"`
}

// Reloads counts the reloads (SIGHUP) and describes the last one.
type Reloads struct {
	OK     uint64  `json:"ok"`
	Failed uint64  `json:"failed"`
	Last   *Reload `json:"last,omitempty"`
}

// Reload is one reload.
type Reload struct {
	Time time.Time `json:"time"`
	OK   bool      `json:"ok"`
	// Error says why a failed reload changed nothing.
	Error string `json:"error,omitempty"`
	// KeptState names the rules that kept their flows and limiter state.
	KeptState []string `json:"kept_state,omitempty"`
}

// Queue is one NFQUEUE queue.
type Queue struct {
	Queue uint16 `json:"queue"`
	// Bound: the kernel lists the queue as bound to packetshaper's socket.
	Bound bool `json:"bound"`
	// Queued is the packets the kernel holds waiting for a verdict now,
	// out of MaxLen; Fill is their ratio. A full queue passes packets
	// without a verdict (fail-open) or drops them (fail-closed).
	Queued uint64  `json:"queued"`
	MaxLen uint32  `json:"max_len"`
	Fill   float64 `json:"fill"`
	// Packets decided by packetshaper, Accepted + Dropped.
	Packets  uint64 `json:"packets"`
	Accepted uint64 `json:"accepted"`
	Dropped  uint64 `json:"dropped"`
	// The kernel's counters: QueueDrops (queue full, fail-closed),
	// SocketDrops (socket buffer full); Lost, packets queued but never
	// received.
	QueueDrops  uint64 `json:"queue_drops"`
	SocketDrops uint64 `json:"socket_drops"`
	Lost        uint64 `json:"lost"`
	Errors      uint64 `json:"errors"`
	// Fail-open: packets passed without a verdict because the queue was
	// full, how long it was, whether the count is exact, and whether it
	// is full now.
	FailOpenPassed uint64  `json:"failopen_passed"`
	FailOpenSecs   float64 `json:"failopen_secs"`
	FailOpenExact  bool    `json:"failopen_exact"`
	FailOpenActive bool    `json:"failopen_active"`
	// The engine's counters: one engine decides for all the queues (a
	// key has one bucket whichever queue its packets arrive on), so they
	// are given once, on its first queue, and are 0 on the others.
	Malformed uint64 `json:"malformed"`
	Unmatched uint64 `json:"unmatched"`
	// Flows: the engine's, and with --fastpath those of the kernel's
	// flow maps.
	Flows uint64 `json:"flows"`
}

// Rule is one rule of the policy with its counters.
type Rule struct {
	Name string `json:"name"`
	// Action is "limit", "accept" or "drop".
	Action string `json:"action"`
	// The limiter of a limit rule: Rate per second in Unit ("packets" or
	// "bytes"), Burst (token-bucket) or WindowSecs (the others).
	Algorithm  string  `json:"algorithm,omitempty"`
	Rate       float64 `json:"rate,omitempty"`
	Unit       string  `json:"unit,omitempty"`
	Burst      float64 `json:"burst,omitempty"`
	WindowSecs float64 `json:"window_secs,omitempty"`
	// Key is how flows are keyed: "5tuple", "src/24", "src-dst
	// symmetric", ...
	Key             string  `json:"key,omitempty"`
	MaxFlows        int     `json:"max_flows,omitempty"`
	FlowTimeoutSecs float64 `json:"flow_timeout_secs,omitempty"`
	Shadow          bool    `json:"shadow,omitempty"`
	MarkExceeded    bool    `json:"mark_exceeded,omitempty"`
	// Shape: a limit rule shapes (holds what exceeds the rate, up to
	// MaxDelaySecs) rather than polices (drops it).
	Shape        bool    `json:"shape"`
	MaxDelaySecs float64 `json:"max_delay_secs,omitempty"`
	// Path is where the rule runs: "queue" (NFQUEUE, the Go engine) or
	// "kernel" (the eBPF fast path, --fastpath; its counters, flows and
	// evictions read from the program's maps: evictions are an upper
	// bound, the flows it inserted less those present).
	Path string `json:"path"`
	// Total names the total the rule charges, if any (Status.Totals).
	Total string `json:"total,omitempty"`

	Packets       uint64 `json:"packets"`
	Accepted      uint64 `json:"accepted"`
	Dropped       uint64 `json:"dropped"`
	ShadowDropped uint64 `json:"shadow_dropped"`
	Marked        uint64 `json:"marked"`
	Flows         uint64 `json:"flows"`
	Evictions     uint64 `json:"evictions"`
	Expired       uint64 `json:"expired"`
}

// A flow's answer line is flowPrefix, the Flow (AppendJSON), flowSuffix.
const (
	flowPrefix = `{"flow":`
	flowSuffix = "}\n"
)

// answer is one answer line: exactly one member is set.
type answer struct {
	Status *Status `json:"status,omitempty"`
	Flow   *Flow   `json:"flow,omitempty"`
	End    *End    `json:"end,omitempty"`
	Error  *string `json:"error,omitempty"`
}

// RateText is a limit rule's rate as the rule was written: bits per second
// with an SI prefix for a bitrate ("10 Mbit/s", Unit "bytes"), packets per
// second for pps ("100 packets/s"); "" for other rules.
func (r *Rule) RateText() string {
	if r.Action != "limit" {
		return ""
	}
	if r.Unit == "bytes" {
		return SIBits(r.Rate*8) + "bit/s"
	}
	return strconv.FormatFloat(r.Rate, 'f', -1, 64) + " packets/s"
}

// SIBits writes a bit rate with an SI prefix and a space: "2 M", "512 k",
// "300 ".
func SIBits(v float64) string {
	for _, p := range []struct {
		f float64
		s string
	}{{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= p.f {
			return strconv.FormatFloat(v/p.f, 'f', -1, 64) + " " + p.s
		}
	}
	return strconv.FormatFloat(v, 'f', -1, 64) + " "
}
