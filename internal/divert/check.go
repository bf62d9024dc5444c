package divert

import (
	"fmt"
	"strings"

	"github.com/packetshaper/packetshaper/policy"
)

// CheckWarnings are packetshaper check's warnings about the rules of f:
// a ct-state rule sharing a divert rule of every state (CtWarning), and
// the rules no divert rule can feed, of those in force in this network
// namespace (rules.sh's rules, by their comments) or, with none, of those
// the service's settings file def (DefaultFile) would install with its
// QUEUE and RULES_OPTS; none of the latter when neither is there. Each
// warning is one line.
func CheckWarnings(f *policy.File, def string) []string {
	var out []string
	warn := func(format string, a ...any) { out = append(out, fmt.Sprintf(format, a...)) }
	if rules, _ := Needed(f, nil); CtWarning(f, rules) != "" {
		out = append(out, CtWarning(f, rules))
	}
	ds, from := InForce()
	source := "by the rules in force (" + strings.Join(from, ", ") + ")"
	if len(ds) == 0 {
		queue, opts, ok, err := ReadDefault(def)
		if err != nil {
			warn("%s: %v (divert rules not checked)", def, err)
			return out
		}
		if !ok {
			return out
		}
		d, pf, err := FromOptions(queue, opts)
		if err != nil {
			warn("%s: RULES_OPTS: %v (divert rules not checked)", def, err)
			return out
		}
		source = fmt.Sprintf("by %s's RULES_OPTS (QUEUE=%s)", def, queue)
		ds = []Rule{d}
		if pf != "" {
			// The rules of that file, on QUEUE's queues.
			pfile, err := policy.Load(pf)
			if err != nil {
				warn("%s: RULES_OPTS --policy: %s (divert rules not checked)", def, strings.Join(strings.Fields(err.Error()), " "))
				return out
			}
			var qs []uint16
			for q := int(d.QueueLo); q <= int(d.QueueHi); q++ {
				qs = append(qs, uint16(q))
			}
			ds, _ = Needed(pfile, qs)
			for i := range ds {
				ds[i].QueueLo, ds[i].QueueHi, ds[i].Chain = d.QueueLo, d.QueueHi, d.Chain
			}
		}
	}
	for _, w := range Unseen(f, ds) {
		if w.Owner {
			warn("%s (diverted %s)", w, source)
			continue
		}
		warn("%s %s (packetshaper divert --policy FILE prints the divert rules the file needs)", w, source)
	}
	return out
}
