package shaper

// DelayHistogram returns the delays of the packets shaping rules delayed so
// far (ns) as a cumulative histogram over bounds (ns, ascending): cum[i]
// counts the delays known to be at most bounds[i] (a bucket counts towards
// a bound when all of it lies at or below it: exact below 128 ns, within
// 1/64 above). Call it from the goroutine that decides, as Delays; it is
// not on the per-packet path.
func (e *Engine) DelayHistogram(bounds []int64) (count uint64, sum int64, cum []uint64) {
	h := e.delays
	cum = make([]uint64, len(bounds))
	var n uint64
	j := 0
	for b := range h.b {
		for up := delayUpper(b); j < len(bounds) && bounds[j] < up; j++ {
			cum[j] = n
		}
		n += h.b[b]
	}
	for ; j < len(bounds); j++ {
		cum[j] = n
	}
	return h.count, h.sum, cum
}
