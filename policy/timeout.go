package policy

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/packetshaper/packetshaper/shaper"
)

// A flow forgotten while its limiter still remembers it (its window not
// over, its bucket not yet refilled) would come back with a fresh window or
// a full bucket: more than keeping it would give. So a rule's flow-timeout
// is at least what its limiter remembers (shaper.LimiterConfig.Memory): the
// default is raised to it, with a warning (Compiled.Warnings); a
// flow-timeout given shorter is refused.

// memory is the limiter of a rule with its defaults filled in (d.Burst set).
func (d *Rule) memory() shaper.LimiterConfig {
	c := d.config()
	return c.LimiterConfig()
}

// minFlowTimeout is the least flow-timeout for the limiter lc: its memory,
// rounded up to a whole second for a readable setting.
func minFlowTimeout(lc shaper.LimiterConfig) Duration {
	m := lc.Memory()
	if m > math.MaxInt64-int64(time.Second) {
		return Duration(m)
	}
	return Duration((m + int64(time.Second) - 1) / int64(time.Second) * int64(time.Second))
}

// checkFlowTimeout checks rule i's flow-timeout against its limiter's
// memory (d is the rule with its defaults): it refuses one given below it,
// and returns the warning for a default raised to it, or "".
func (f *File) checkFlowTimeout(i int, d *Rule, bad func(format string, args ...any) *Error) string {
	r := &f.Rules[i]
	lc := d.memory()
	mem := lc.Memory()
	if r.FlowTimeout != 0 {
		if int64(r.FlowTimeout) < mem {
			bad("%v is below what the %s remembers of an idle flow, %v (%s): a flow forgotten sooner would come back with more than its limit; set at least %v or leave flow-timeout out",
				r.FlowTimeout, d.Algo, time.Duration(mem), lc.MemoryWhat(), minFlowTimeout(lc))
		}
		return ""
	}
	if def := Duration(shaper.DefaultFlowTimeout); d.FlowTimeout > def {
		return fmt.Sprintf("rule %s: flow-timeout: the default %v is raised to %v, what its %s remembers of an idle flow (%s): a flow forgotten sooner would come back with more than its limit",
			strconv.Quote(r.Name), def, d.FlowTimeout, d.Algo, lc.MemoryWhat())
	}
	return ""
}
