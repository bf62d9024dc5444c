package replay

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/packetshaper/packetshaper/internal/countname"
)

// WriteSummary writes what r replayed as packetshaper replay prints it
// without --json: the totals, the rules, and the top flows over their
// limit; files is the number of captures replayed, elapsed the wall time
// they took, asLocal the global rules replayed as local ones.
func (r *Replayer) WriteSummary(w io.Writer, files int, elapsed time.Duration, top int, asLocal []string) {
	s := r.Summary()
	fmt.Fprintf(w, "packets    %d: accepted %d, dropped %d (malformed %d, %s %d, unmatched %d, non_ip %d)\n",
		s.Packets, s.Accepted, s.Dropped, s.Malformed, countname.NoPorts, s.NoPorts, s.Unmatched, s.NonIP)
	fmt.Fprintf(w, "flows      %d in the table at the end, %d seen, %d evicted, %d expired\n",
		s.Flows, s.FlowsSeen, s.Evictions, s.Expired)
	if s.Delayed > 0 || s.ShapeOverflow > 0 {
		fmt.Fprintf(w, "shaping    delayed %d, %s %d; delay p50 %v, p99 %v, max %v\n",
			s.Delayed, countname.ShapeOverflow, s.ShapeOverflow, time.Duration(s.Delays.P50), time.Duration(s.Delays.P99), time.Duration(s.Delays.Max))
	}
	if ct := r.Conntrack(); ct != nil {
		fmt.Fprintf(w, "conntrack  new %d, established %d, related %d, invalid %d (replay's tracker, for ct-state matches)\n", ct.New, ct.Established, ct.Related, ct.Invalid)
		if ct.PickedUp > 0 || ct.OneWay > 0 || ct.Evicted > 0 {
			fmt.Fprintf(w, "           where the kernel may differ: %d TCP packets of connections the capture does not open (taken as established; the kernel gives the first of each new), %d conversations seen one way only (every packet new: an asymmetric capture?), %d evicted from a full table\n", ct.PickedUp, ct.OneWay, ct.Evicted)
		}
	}
	if s.NoOwner > 0 {
		fmt.Fprintf(w, "no owner   %d packets of rules keyed by uid or gid: a capture holds no socket owners, so each such rule had one flow, \"no owner\"\n", s.NoOwner)
	}
	fmt.Fprintf(w, "capture    %d file(s), %v of capture time\n", files, s.Duration())
	rate := 0.0
	if elapsed > 0 {
		rate = float64(s.Packets) / elapsed.Seconds()
	}
	round := time.Millisecond
	if elapsed < time.Second {
		round = time.Microsecond
	}
	fmt.Fprintf(w, "replay     %v, %s packets/s\n", elapsed.Round(round), humanRate(rate))
	fmt.Fprintf(w, "rules:\n  %-20s %10s %10s %10s %10s %10s %8s %9s\n", "RULE", "PACKETS", "ACCEPTED", "DROPPED", "SHADOWDROP", "MARKED", "FLOWS", "EVICTIONS")
	for _, ru := range r.Rules() {
		fmt.Fprintf(w, "  %-20s %10d %10d %10d %10d %10d %8d %9d\n", ru.Name, ru.Packets, ru.Accepted, ru.Dropped, ru.ShadowDropped, ru.Marked, ru.Flows, ru.Evictions)
	}
	if ts := r.Totals(); len(ts) > 0 {
		fmt.Fprintf(w, "totals (accepted: passed and charged; dropped: over the total):\n  %-20s %10s %10s %10s\n", "TOTAL", "PACKETS", "ACCEPTED", "DROPPED")
		for _, t := range ts {
			fmt.Fprintf(w, "  %-20s %10d %10d %10d\n", t.Name, t.Packets, t.Accepted, t.Dropped)
		}
	}
	if len(asLocal) > 0 {
		fmt.Fprintf(w, "global rules replayed as local (a capture holds one host's view): %s\n", strings.Join(asLocal, ", "))
	}
	// The flows over their limit: most drops first, then most shadow
	// drops or marks (accepted: shadow and marking rules).
	fl := r.Flows(top)
	over := func(f *FlowSummary) bool { return f.Dropped+f.ShadowDropped+f.Marked > 0 }
	if len(fl) == 0 || !over(&fl[0]) {
		fmt.Fprintln(w, "no flow had drops, shadow drops or marks")
		return
	}
	fmt.Fprintln(w, "flows with the most drops (then shadow drops, marks):")
	fmt.Fprintf(w, "  %10s %10s %10s %10s  %-20s %s\n", "DROPPED", "SHADOWDROP", "MARKED", "PACKETS", "RULE", "FLOW")
	rules := r.Rules()
	for _, f := range fl {
		if !over(&f) {
			break
		}
		fmt.Fprintf(w, "  %10d %10d %10d %10d  %-20s %s\n", f.Dropped, f.ShadowDropped, f.Marked, f.Packets, rules[f.Rule].Name, f.Flow)
	}
}

// humanRate is a rate of packets per second, to three figures.
func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}
