package shaper

// DelayHistogram returns the delays of the packets shaping rules delayed so
// far (ns) as a cumulative histogram over bounds (ns, ascending): cum[i]
// counts the delays known to be at most bounds[i] (a bucket counts towards
// a bound when all of it lies at or below it: exact below 128 ns, within
// 1/64 above). Call it from the goroutine that decides, as Delays; it is
// not on the per-packet path.
func (e *Engine) DelayHistogram(bounds []int64) (count uint64, sum int64, cum []uint64) {
	cum = make([]uint64, len(bounds))
	e.delays.Fold(bounds, cum)
	s := e.delays.Stats()
	return s.Count, s.Sum, cum
}
